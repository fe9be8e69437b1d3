"""The input length a fine-tuning run asks for, checked against the tokenizer and the model's position table once
the tokenizer is known and before any weights load.

The tokenizer does not refuse a length it cannot honour: below its special tokens it ignores `max_length` and
returns whole inputs; at exactly their count every input is the special tokens alone. A model whose position table
is shorter than the inputs fails in the middle of training (TISA `add` mode, or no TISA), or never (`replace` mode
reads any length)."""

from __future__ import annotations

from transformers import AutoConfig, AutoTokenizer, PreTrainedTokenizerBase

from ..common.checkpoints import check_sequence_length
from ..common.hub_access import loading_errors, model_remedy
from ..errors import UsageError
from .arguments import TisaArguments
from .preflight import RunPlan


def special_token_count(tokenizer: PreTrainedTokenizerBase, segments: int) -> int:
    """Tokens the tokenizer adds to an input of `segments` texts (BERT: [CLS] a [SEP] b [SEP], 3 for a pair)."""
    return tokenizer.num_special_tokens_to_add(pair=segments == 2)


def check_room_for_text(tokenizer: PreTrainedTokenizerBase, max_seq_length: int, segments: int) -> None:
    """Refuses a length that cannot hold the special tokens and one token of each of the `segments` texts."""
    specials = special_token_count(tokenizer, segments)
    minimum = specials + segments
    if max_seq_length < minimum:
        raise UsageError(
            f"--max-seq-length {max_seq_length} cannot hold {'a pair of texts' if segments == 2 else 'a text'}: "
            f"the tokenizer adds {specials} special tokens, and each text needs at least one token; use "
            f"--max-seq-length {minimum} or more."
        )


def check_position_table(max_seq_length: int, plan: RunPlan, tisa_args: TisaArguments) -> None:
    """Refuses a length longer than the position table the model keeps, from its config alone."""
    with loading_errors(f"the config of {plan.model.path}", model_remedy()):
        config = AutoConfig.from_pretrained(plan.model.path, local_files_only=plan.model.local_files_only)
    check_sequence_length(config, max_seq_length, tisa_args.tisa_config(), name=str(plan.model.path))


def check_input_lengths(
    plan: RunPlan, tisa_args: TisaArguments, max_seq_length: int, segments: int
) -> PreTrainedTokenizerBase:
    """Checks `max_seq_length` for inputs of `segments` texts against the tokenizer and the position table;
    returns the tokenizer, for a task's own checks."""
    with loading_errors(f"the tokenizer {plan.tokenizer.path}", model_remedy()):
        tokenizer = AutoTokenizer.from_pretrained(plan.tokenizer.path, local_files_only=plan.tokenizer.local_files_only)
    check_room_for_text(tokenizer, max_seq_length, segments)
    check_position_table(max_seq_length, plan, tisa_args)
    return tokenizer
