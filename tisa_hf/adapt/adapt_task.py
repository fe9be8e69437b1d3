"""`tisa-hf adapt` / `accelerate launch -m tisa_hf.adapt`: adapt a pretrained encoder to TISA on plain text.

The curriculum runs the block lengths short to long, with `--max-steps` split equally between them (the
remainder going to the longest ones) and one learning-rate schedule over all of them; each optimizer step takes
`--train-batch-size` blocks whatever their length. Every request is checked against the run folder (as for
`tisa-hf glue`: --resume, --overwrite-output-dir), the checkpoint's config, the tokenizer and the text before any
weights load.

Writes to --output-dir what `tisa-hf glue` writes: the adapted model and tokenizer (`save_pretrained`, TISA
included, ready for `tisa-hf glue --model DIR`), `metrics.json` (with an `adaptation` record of how it was
adapted, which `tisa-hf push` puts in the model card), `run_config.yaml` and TensorBoard logs; resumable
checkpoints live in `checkpoints/` until the run finishes. For a sentence-transformers base the folder is a
sentence-transformers model too (`sentence_output.py`).
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from accelerate import Accelerator, PartialState
from torch import nn
from torch.utils.data import DataLoader, StackDataset
from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer, PreTrainedModel, default_data_collator

from ..common.checkpoints import CheckpointFacts, reads_any_length
from ..common.hub_access import loading_errors, model_remedy
from ..common.model_cards import mark_adapted
from ..common.sentence_models import (
    check_mean_pooling,
    reading_tokenizer,
    write_card,
    write_sentence_transformer_modules,
)
from ..common.text import (
    block_count,
    mask_blocks,
    pack_blocks,
    read_articles,
    split_articles,
    spread_selection,
    tokenize_articles,
)
from ..config import TisaConfig
from ..errors import UsageError
from ..finetune.arguments import ModelArguments
from ..finetune.preflight import RunPlan, plan_run
from ..finetune.recipe import (
    command_main,
    finish_run,
    init_trackers,
    load_model_and_tokenizer,
    prepare_training,
    resolve_settings,
    run_record,
    started_run,
)
from ..finetune.trainer import TrainingStage, fit, micro_batch_size, resolve_schedule, train_dataloader
from .arguments import ADAPT_ARGUMENTS, AdaptArguments, AdaptTisaArguments, AdaptTrainingArguments
from .objectives import DistillationObjective, EmbeddingObjective, MaskedLMObjective, check_mlm_head_module, mlm_head_of
from .sentence_output import reading_length_line, sentence_output_limit

EVAL_MASKING_SEED = 0


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
    if adapt_args.objective == "distill":
        raise UsageError(
            f"--objective distill compares with the teacher, which reads at most {table} tokens, and --lengths has "
            f"{longest}; keep the lengths <= {table}, or train longer blocks with --objective mlm in replace mode."
        )
    if not reads_any_length(tisa):
        kept_by = "TISA mode='add'" if tisa is not None else "the unpatched model"
        raise UsageError(
            f"--lengths has {longest} tokens but {facts.name}'s position table holds {table}, which {kept_by} keeps; "
            f"use --tisa.mode replace, or lengths <= {table}."
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


def set_trainable(model: PreTrainedModel, train: str, objective: str) -> None:
    """Freezes all but the trained parameters. `all` leaves the pooler frozen (no objective reaches it) and, for
    distillation, the head too; `head` leaves the head's weights shared with the encoder (the tied decoder) frozen."""
    base = model.base_model
    model.requires_grad_(False)
    if train in ("head", "all") and objective == "mlm":
        mlm_head_of(model).requires_grad_(True)
    if train == "head":
        base.requires_grad_(False)  # the head's decoder weight is the encoder's word embeddings
    elif train == "all":
        base.requires_grad_(True)
        if getattr(base, "pooler", None) is not None:
            base.pooler.requires_grad_(False)
    else:
        base.tisa.requires_grad_(True)


def build_objective(plan: AdaptationPlan, tisa_args: AdaptTisaArguments, adapt_args: AdaptArguments) -> nn.Module:
    """The student (with its head when the checkpoint has one) inside its objective; for distillation and the
    embedding objective, the unpatched teacher too."""
    new_head = adapt_args.objective == "mlm" and not plan.facts.has_mlm_head  # --train head (checked)
    auto_class = AutoModelForMaskedLM if plan.facts.has_mlm_head or new_head else AutoModel
    student, _ = load_model_and_tokenizer(auto_class, plan.run, tisa_args)  # a new head is logged at INFO
    set_trainable(student, adapt_args.train, adapt_args.objective)
    if adapt_args.objective == "mlm":
        return MaskedLMObjective(student, plan.tokenizer, adapt_args.mlm_probability)
    source = plan.run.model
    # The student's class: loaded as a bare AutoModel, a checkpoint with an MLM head would log its head as
    # unexpected and a pooler as missing, though only the encoder's hidden states are compared.
    with loading_errors(f"the teacher {source.path}", model_remedy()):
        teacher = auto_class.from_pretrained(source.path, local_files_only=source.local_files_only)
    layers, loss = adapt_args.distill_layers, adapt_args.distill_loss
    if adapt_args.objective == "embed":
        return EmbeddingObjective(
            student,
            teacher,
            plan.facts.table_length,
            adapt_args.embed_token_weight,
            layers,
            loss,
            adapt_args.embed_span_weight,
            adapt_args.embed_span_tokens,
        )
    return DistillationObjective(student, teacher, layers, loss)


def training_stages(
    plan: AdaptationPlan, adapt_args: AdaptArguments, batch_size: int, seed: int
) -> list[TrainingStage]:
    """One stage per length, short to long: shuffled blocks packed from the training articles."""
    return [
        TrainingStage(
            train_dataloader(
                StackDataset(input_ids=pack_blocks(plan.train_documents, length, plan.tokenizer)),
                batch_size,
                default_data_collator,
                seed,
            ),
            steps,
            name=f"length {length}",
        )
        for length, steps in zip(adapt_args.lengths, plan.steps, strict=True)
    ]


def held_out_loaders(plan: AdaptationPlan, adapt_args: AdaptArguments, batch_size: int) -> dict[int, DataLoader]:
    """Per length, the held-out blocks (spread over the text) and, for the MLM objective, their fixed masks."""
    loaders = {}
    for length in adapt_args.lengths if plan.held_out_documents else ():
        blocks = pack_blocks(plan.held_out_documents, length, plan.tokenizer)
        blocks = spread_selection(blocks, adapt_args.max_eval_blocks)
        columns = {"input_ids": blocks}
        if adapt_args.objective == "mlm":
            masked, labels = mask_blocks(blocks, plan.tokenizer, adapt_args.mlm_probability, EVAL_MASKING_SEED)
            columns = {"input_ids": masked, "labels": labels}
        loaders[length] = DataLoader(StackDataset(**columns), batch_size=batch_size, collate_fn=default_data_collator)
    return loaders


class HeldOutLossEvaluator:
    """The objective's loss on the held-out blocks of every length (token-weighted over all processes)."""

    def __init__(self, accelerator: Accelerator, objective: nn.Module, loaders: dict[int, DataLoader]) -> None:
        self.accelerator, self.objective, self.loaders = accelerator, objective, loaders

    def __call__(self) -> dict[str, dict[str, float]]:
        losses = {}
        for length, loader in self.loaders.items():
            total, count = 0.0, 0
            for batch in loader:
                output = self.objective(**batch)
                sums, counts = self.accelerator.gather_for_metrics((output.sums, output.counts))
                total += sums.sum().item()
                count += counts.sum().item()
            losses[str(length)] = total / count
        return {"held_out_loss": losses}


def adaptation_record(plan: AdaptationPlan, adapt_args: AdaptArguments, batch_size: int) -> dict[str, Any]:
    """How the model was adapted, for metrics.json and the model card."""
    record: dict[str, Any] = {"objective": adapt_args.objective, "train": adapt_args.train}
    if adapt_args.objective == "mlm":
        record["mlm_probability"] = adapt_args.mlm_probability
    else:
        record["teacher"] = plan.facts.name
    if adapt_args.objective == "embed":
        record.update(teacher_table=plan.facts.table_length, embed_token_weight=adapt_args.embed_token_weight)
        if adapt_args.embed_span_weight:
            record.update(
                embed_span_weight=adapt_args.embed_span_weight, embed_span_tokens=adapt_args.embed_span_tokens
            )
    if adapt_args.objective == "distill" or adapt_args.objective == "embed" and adapt_args.embed_token_weight:
        record.update(distill_layers=adapt_args.distill_layers, distill_loss=adapt_args.distill_loss)
    record.update(
        text=adapt_args.train_text,
        articles={"train": len(plan.train_documents), "held_out": len(plan.held_out_documents)},
        batch_size=batch_size,
        curriculum=[
            {"length": length, "steps": steps, "blocks": block_count(plan.train_documents, length)}
            for length, steps in zip(adapt_args.lengths, plan.steps, strict=True)
        ],
    )
    if plan.sentence_limit is not None:
        record["max_seq_length"] = plan.sentence_limit
    return record


def run(
    model_args: ModelArguments,
    tisa_args: AdaptTisaArguments,
    args: AdaptTrainingArguments,
    adapt_args: AdaptArguments,
) -> dict[str, Any]:
    """One adaptation run; returns what it writes to metrics.json. The saved model is the student inside the
    objective, marked as adapted in its config."""
    started = time.perf_counter()
    # The steps are always given: this resolves the warm-up ratio, before the run folder is checked.
    args = resolve_schedule(args, num_batches=args.max_steps)
    adaptation = plan_adaptation(model_args, tisa_args, args, adapt_args)
    plan, limit = adaptation.run, adaptation.sentence_limit

    with started_run(args, plan) as (accelerator, batch_size):
        objective = build_objective(adaptation, tisa_args, adapt_args)
        if isinstance(objective, DistillationObjective):
            objective.teacher.to(accelerator.device)
        # saved with the model: a sentence-transformers model's tokenizer records how many tokens it reads
        tokenizer = adaptation.tokenizer if limit is None else reading_tokenizer(adaptation.tokenizer, limit)
        with accelerator.main_process_first():
            train = training_stages(adaptation, adapt_args, batch_size, args.seed)
            evaluation = held_out_loaders(adaptation, adapt_args, args.eval_batch_size)
        args, config, _ = resolve_settings(accelerator, plan, (model_args, tisa_args, args, adapt_args), None)
        objective, optimizer, scheduler, train, evaluation = prepare_training(
            accelerator, objective, args, tisa_args.tisa_lr, train, evaluation
        )
        init_trackers(accelerator, "adapt", config)
        evaluate = HeldOutLossEvaluator(accelerator, objective, evaluation)
        state = fit(
            accelerator, objective, optimizer, scheduler, train, evaluate, args,
            resume_from=plan.resume_from, started=started,
        )  # fmt: skip

        student = accelerator.unwrap_model(objective).model
        record = run_record("adapt", student, args, state, accelerator, config)
        record["adaptation"] = adaptation_record(adaptation, adapt_args, args.train_batch_size)
        mark_adapted(student, record["model"], adapt_args.objective, adapt_args.train)
        if limit is not None and accelerator.is_main_process:  # beside the checkpoint `finish_run` saves
            base, output_dir = adaptation.facts.path, Path(args.output_dir)
            write_sentence_transformer_modules(output_dir, student.config.hidden_size, limit, base)
            write_card(student, output_dir, base, limit, record)
        finish_run(accelerator, student, tokenizer, args, record)
    return record


def main(argv: list[str] | None = None) -> int:
    return command_main("tisa-hf adapt", ADAPT_ARGUMENTS, run, argv, closing=reading_length_line)
