"""`tisa-hf adapt` / `accelerate launch -m tisa_hf.commands.adapt`: adapt a pretrained encoder to TISA on plain text.

The curriculum runs the block lengths short to long, with `--max-steps` split equally between them (the
remainder going to the longest ones) and one learning-rate schedule over all of them; each optimizer step takes
`--train-batch-size` blocks whatever their length. Every request is checked against the run folder (as for
`tisa-hf glue`: --resume, --overwrite-output-dir), the checkpoint's config, the tokenizer and the text before any
weights load (`plan.py`).

Writes to --output-dir what `tisa-hf glue` writes: the adapted model and tokenizer (`save_pretrained`, TISA
included, ready for `tisa-hf glue --model DIR`), `metrics.json` (with an `adaptation` record of how it was
adapted, which `tisa-hf push` puts in the model card), `run_config.yaml` and TensorBoard logs; resumable
checkpoints live in `checkpoints/` until the run finishes. For a sentence-transformers base the folder is a
sentence-transformers model too (`sentence_output.py`); `--multi-vector` adds `multi-vector/`, a `MultiVectorEncoder`.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from accelerate import Accelerator
from torch import nn
from torch.utils.data import DataLoader, StackDataset
from transformers import AutoModel, AutoModelForMaskedLM, PreTrainedModel, default_data_collator

from ..common.hub_access import loading_errors, model_remedy
from ..common.model_cards import mark_adapted
from ..common.sentence_models import (
    reading_tokenizer,
    write_card,
    write_sentence_transformer_modules,
)
from ..common.text import (
    block_count,
    mask_blocks,
    pack_blocks,
    spread_selection,
)
from ..finetune.arguments import ModelArguments
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
from ..finetune.run_folder import RunFolder
from ..finetune.trainer import TrainingStage, fit, resolve_schedule, train_dataloader, unwrapped
from ..multivector.encoder import save_multi_vector_encoder
from .arguments import ADAPT_ARGUMENTS, AdaptArguments, AdaptTisaArguments, AdaptTrainingArguments
from .objectives import DistillationObjective, EmbeddingObjective, MaskedLMObjective, mlm_head_of
from .plan import AdaptationPlan, plan_adaptation
from .sentence_output import closing_lines
from .windowed_teacher import window_stride

EVAL_MASKING_SEED = 0


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
    return DistillationObjective(student, teacher, plan.facts.table_length, layers, loss)


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
    if adapt_args.objective == "distill" and max(adapt_args.lengths) > plan.facts.table_length:
        record.update(
            teacher_table=plan.facts.table_length, teacher_window_stride=window_stride(plan.facts.table_length)
        )
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

        student = unwrapped(accelerator, objective).model
        record = run_record("adapt", student, args, state, accelerator, config)
        record["adaptation"] = adaptation_record(adaptation, adapt_args, args.train_batch_size)
        mark_adapted(student, record["model"], adapt_args.objective, adapt_args.train)
        if limit is not None and accelerator.is_main_process:  # beside the checkpoint `finish_run` saves
            base, output_dir = adaptation.facts.path, Path(args.output_dir)
            write_sentence_transformer_modules(output_dir, student.config.hidden_size, limit, base)
            write_card(student, output_dir, base, limit, record)
        finish_run(accelerator, student, tokenizer, args, record)
        if adapt_args.multi_vector and accelerator.is_main_process:  # from the saved run, whose files it reads
            save_multi_vector_encoder(args.output_dir, RunFolder(args.output_dir).multi_vector_dir, overwrite=True)
    return record


def main(argv: list[str] | None = None) -> int:
    return command_main("tisa-hf adapt", ADAPT_ARGUMENTS, run, argv, closing=closing_lines)
