"""What `tisa-hf adapt` checks before any weights load, and the plan it makes of it: the settings against the
checkpoint's config, the tokenizer, the text and its blocks of every length, the run folder and the model source
(`plan_adaptation`). Every request that cannot work fails here, in one line, in seconds."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from accelerate import PartialState
from transformers import AutoTokenizer

from ..common.checkpoints import CheckpointFacts, reads_any_length
from ..common.hub_access import loading_errors, model_remedy
from ..common.sentence_models import check_mean_pooling, require_sentence_transformers
from ..common.text import block_count, read_articles, split_articles, tokenize_articles
from ..config import TisaConfig
from ..errors import UsageError
from ..finetune.arguments import ModelArguments
from ..finetune.preflight import RunPlan, plan_run
from ..finetune.trainer import micro_batch_size
from .arguments import AdaptArguments, AdaptTisaArguments, AdaptTrainingArguments
from .objectives import check_mlm_head_module
from .sentence_output import sentence_output_limit


def curriculum_steps(max_steps: int, stages: int) -> list[int]:
    """Equal shares of `max_steps`, the remainder one step each to the last (longest) stages."""
    share, remainder = divmod(max_steps, stages)
    return [share + (index >= stages - remainder) for index in range(stages)]


@dataclass
class AdaptationPlan:
    """Everything checked before any weights load: the run folder and model source (`run`), the checkpoint, the
    student's TISA, the tokenizer, the blocks of every length and, for a sentence-transformers base, the
    `max_seq_length` of the sentence-transformers model written (`sentence_limit`; None: none is written)."""

    run: RunPlan
    facts: CheckpointFacts
    tisa: TisaConfig | None
    tokenizer: Any
    train_documents: list[list[int]]
    held_out_documents: list[list[int]]
    steps: list[int]
    sentence_limit: int | None = None


def _check_settings(facts: CheckpointFacts, tisa_args: AdaptTisaArguments, adapt_args: AdaptArguments) -> TisaConfig:
    """The student's TISA config (requested or the checkpoint's); errors for objectives the model cannot do."""
    requested = tisa_args.tisa_config()
    name = facts.name
    if adapt_args.train == "head":
        if adapt_args.objective != "mlm":
            raise UsageError("--train head fits an MLM head, so it goes with --objective mlm.")
        if requested is not None:
            raise UsageError(
                "--train head fits an MLM head on the model as it is and trains no kernels; leave out the --tisa "
                "options (fit the head on the original model, or on an already adapted one)."
            )
        return facts.tisa
    if adapt_args.objective == "mlm":
        check_mlm_head_module(facts.config)
    if adapt_args.objective == "mlm" and not facts.has_mlm_head:
        raise UsageError(
            f"--objective mlm needs an MLM head and {name} has none (its config names "
            f"{', '.join(facts.architectures) or 'no architecture'}); fit one first with `tisa-hf adapt --model "
            f"{name} --objective mlm --train head --output-dir HEAD_DIR` and adapt HEAD_DIR, or use "
            "--objective distill."
        )
    if requested is not None and facts.tisa is not None:
        raise UsageError(f"{name} already has TISA ({facts.tisa}); leave out the --tisa options to adapt it further.")
    if adapt_args.objective in ("distill", "embed") and facts.tisa is not None:
        raise UsageError(
            f"--objective {adapt_args.objective} needs the original model as its teacher, but {name} already has TISA; "
            "give the unpatched checkpoint and the --tisa options."
        )
    tisa = requested or facts.tisa
    if tisa is None:
        raise UsageError(f"Nothing to adapt: give --tisa.num_kernels (and --tisa.mode) to patch {name} with TISA.")
    if adapt_args.train == "kernels" and tisa.num_kernels == 0:
        raise UsageError(
            "--train kernels, but num_kernels is 0 (the bag-of-words model has no kernels); use --train all."
        )
    return tisa


def _check_lengths(
    facts: CheckpointFacts, tisa: TisaConfig | None, args: AdaptTrainingArguments, adapt_args: AdaptArguments
) -> None:
    lengths = adapt_args.lengths
    if min(lengths) < 3 or any(a >= b for a, b in zip(lengths, lengths[1:], strict=False)):
        raise UsageError(f"--lengths must increase (short to long) and be at least 3 tokens; got {lengths}.")
    if args.max_steps < len(lengths):
        raise UsageError(f"--max-steps {args.max_steps} is fewer than the {len(lengths)} lengths of the curriculum.")
    table, longest = facts.table_length, max(lengths)
    if longest <= table:
        return
    if not reads_any_length(tisa):
        kept_by = "TISA mode='add'" if tisa is not None else "the unpatched model"
        raise UsageError(
            f"--lengths has {longest} tokens but {facts.name}'s {facts.positions.describes} holds {table}, which "
            f"{kept_by} keeps; use --tisa.mode replace, or lengths <= {table}."
        )


def _check_span_retrieval(args: AdaptTrainingArguments, adapt_args: AdaptArguments) -> None:
    """Span retrieval needs a span inside every block and another block to tell it from."""
    if not adapt_args.embed_span_weight:
        return
    shortest = min(adapt_args.lengths)
    if adapt_args.embed_span_tokens > shortest - 2:
        raise UsageError(
            f"--embed-span-tokens {adapt_args.embed_span_tokens} does not fit inside the shortest blocks, {shortest} "
            f"tokens with [CLS] and [SEP]; use at most {shortest - 2}."
        )
    processes = PartialState().num_processes
    blocks = micro_batch_size(args, processes) // processes
    if blocks < 2:
        raise UsageError(
            f"--embed-span-weight ranks each span's block among the other blocks of its micro-batch, and a "
            f"micro-batch here holds {blocks} (--train-batch-size {args.train_batch_size} / "
            f"--gradient-accumulation-steps {args.gradient_accumulation_steps} / {processes} process(es)); use fewer "
            "accumulation steps or a larger batch."
        )


def _check_text(
    path: str, articles: list[str], documents: tuple[list, list], batch_size: int, adapt_args: AdaptArguments
) -> None:
    train, held_out = documents
    if adapt_args.held_out_fraction > 0 and len(articles) < 2:
        raise UsageError(
            f"{path} has a single article, so none can be held out for evaluation; give a text of several articles "
            "(WikiText ' = Title = ' headings, or paragraphs between blank lines) or --held-out-fraction 0."
        )
    for length in adapt_args.lengths:
        blocks = block_count(train, length)
        if blocks < batch_size:
            raise UsageError(
                f"{path} is too short for --lengths {length}: its training articles give {blocks} block(s) of "
                f"{length} tokens, fewer than one batch of {batch_size} (--train-batch-size); use a longer text, "
                "shorter lengths or a smaller batch."
            )
        if held_out and not block_count(held_out, length):
            raise UsageError(
                f"{path}: the {len(held_out)} held-out article(s) give no block of {length} tokens; raise "
                "--held-out-fraction or use a longer text."
            )


def plan_adaptation(
    model_args: ModelArguments,
    tisa_args: AdaptTisaArguments,
    args: AdaptTrainingArguments,
    adapt_args: AdaptArguments,
) -> AdaptationPlan:
    """Checks every request against the run folder, the checkpoint's config, the tokenizer and the text; loads no
    weights. `args` has its schedule resolved."""
    if adapt_args.train_text is None:
        raise UsageError("--train-text is required: a plain-text file such as WikiText's valid.txt.")
    if not 0 <= adapt_args.held_out_fraction < 1:
        raise UsageError(f"--held-out-fraction must be in [0, 1); got {adapt_args.held_out_fraction}.")
    run_plan = plan_run(model_args, tisa_args, args, adapt_args)
    facts = CheckpointFacts.read(model_args.model)
    tisa = _check_settings(facts, tisa_args, adapt_args)
    _check_lengths(facts, tisa, args, adapt_args)
    _check_span_retrieval(args, adapt_args)
    sentence_limit = sentence_output_limit(facts, tisa, adapt_args)
    if adapt_args.multi_vector:
        require_sentence_transformers()
    if sentence_limit is not None and adapt_args.objective == "embed":
        check_mean_pooling(facts.path)
    source = run_plan.tokenizer
    with loading_errors(f"the tokenizer {source.path}", model_remedy()):
        tokenizer = AutoTokenizer.from_pretrained(source.path, local_files_only=source.local_files_only)
    articles = read_articles(adapt_args.train_text)
    train, held_out = split_articles(articles, adapt_args.held_out_fraction)
    documents = (tokenize_articles(train, tokenizer), tokenize_articles(held_out, tokenizer) if held_out else [])
    _check_text(adapt_args.train_text, articles, documents, args.train_batch_size, adapt_args)
    steps = curriculum_steps(args.max_steps, len(adapt_args.lengths))
    return AdaptationPlan(run_plan, facts, tisa, tokenizer, *documents, steps, sentence_limit)
