"""The input length a fine-tuning run asks for, checked against the tokenizer and the model's position table once
the tokenizer is known and before any weights load.

The tokenizer does not refuse a length it cannot honour: below its special tokens it ignores `max_length` and
returns whole inputs; at exactly their count every input is the special tokens alone. A model whose position table
is shorter than the inputs fails in the middle of training (TISA `add` mode, or no TISA), or never (`replace` mode
reads any length)."""

from __future__ import annotations

import torch
from transformers import AutoConfig, AutoModel, AutoTokenizer, PreTrainedConfig, PreTrainedTokenizerBase

from ..adapters import find_base_model
from ..config import TisaConfig
from ..errors import UsageError
from ..hub_access import loading_errors, model_remedy
from ..model_configs import plain_model_config
from ..patching import position_table_length
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


def position_limit(config: PreTrainedConfig, tisa: TisaConfig | None) -> int | None:
    """Tokens an input may have: the rows of the position table real tokens use (RoBERTa's start after
    padding_idx), or None when the model reads any length (TISA `replace` mode) or its architecture is unknown."""
    if tisa is not None and tisa.mode == "replace":
        return None
    try:
        with torch.device("meta"):  # the architecture without its weights
            base, adapter = find_base_model(AutoModel.from_config(plain_model_config(config)))
    except ValueError:  # an architecture TISA does not support: nothing here knows its table
        return None
    return position_table_length(base, adapter)


def check_position_table(max_seq_length: int, plan: RunPlan, tisa_args: TisaArguments) -> None:
    """Refuses a length longer than the position table the model keeps, from its config alone."""
    with loading_errors(f"the config of {plan.model.path}", model_remedy()):
        config = AutoConfig.from_pretrained(plan.model.path, local_files_only=plan.model.local_files_only)
    saved = getattr(config, "tisa", None)
    tisa = tisa_args.tisa_config() or (TisaConfig.from_value(saved) if saved else None)
    limit = position_limit(config, tisa)
    if limit is None or max_seq_length <= limit:
        return
    kept_by = "TISA mode 'add' keeps" if tisa is not None else "the model without TISA uses"
    replace = "--tisa.mode replace" if tisa is not None else "--tisa.num_kernels N --tisa.mode replace"
    raise UsageError(
        f"--max-seq-length {max_seq_length} is longer than the position table of {plan.model.path} ({limit} "
        f"positions), which {kept_by}: longer inputs would fail in the middle of training. Use --max-seq-length "
        f"{limit}, or TISA's replace mode ({replace}), which reads any length."
    )


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
