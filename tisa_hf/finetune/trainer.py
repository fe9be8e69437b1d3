"""A task-agnostic Accelerate training loop: AdamW with linear warm-up/decay, gradient accumulation, periodic
evaluation, resumable checkpoints and tracker logging. GLUE and SQuAD plug in their model, data and an
`evaluate` callback; adaptation trains in stages (a curriculum of data loaders, one after the other).
"""

from __future__ import annotations

import json
import logging
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.utils import DataLoaderConfiguration, GradientAccumulationPlugin, ProjectConfiguration
from torch import nn
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm
from transformers import get_scheduler

from .arguments import TrainingArguments

logger = logging.getLogger(__name__)

CHECKPOINTS_DIR = "checkpoints"
TRAINER_STATE = "trainer_state.json"
NO_DECAY = ("bias", "LayerNorm.weight", "layer_norm.weight", "norm.weight")

Evaluate = Callable[[], dict[str, float]]


@dataclass
class TrainerState:
    """What a checkpoint needs beyond Accelerate's state: the step reached and the evaluations so far."""

    step: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)


def build_accelerator(args: TrainingArguments) -> Accelerator:
    """One optimizer step consumes the same `train_batch_size` examples whatever the number of processes: each
    batch is split across processes (`split_batches`), and shuffling depends only on the seed and the epoch."""
    trackers = [name.strip() for name in args.report_to.split(",") if name.strip()]
    return Accelerator(
        mixed_precision=args.mixed_precision,
        gradient_accumulation_plugin=GradientAccumulationPlugin(
            num_steps=args.gradient_accumulation_steps, sync_with_dataloader=False
        ),
        dataloader_config=DataLoaderConfiguration(split_batches=True, use_seedable_sampler=True, data_seed=args.seed),
        log_with=None if args.no_tracking or not trackers else trackers,
        project_config=ProjectConfiguration(
            project_dir=args.output_dir, logging_dir=str(Path(args.output_dir, "logs"))
        ),
    )


def micro_batch_size(args: TrainingArguments, num_processes: int) -> int:
    """Examples per data-loader batch (all processes together), checking that the global batch divides evenly."""
    size, remainder = divmod(args.train_batch_size, args.gradient_accumulation_steps)
    if remainder or size % num_processes:
        raise ValueError(
            f"train_batch_size {args.train_batch_size} must split evenly into {args.gradient_accumulation_steps} "
            f"accumulation step(s) x {num_processes} process(es); change --train-batch-size or "
            "--gradient-accumulation-steps."
        )
    return size


def train_dataloader(dataset: Dataset, batch_size: int, collate_fn: Callable, seed: int) -> DataLoader:
    """Shuffled batches; the dedicated generator keeps data-loading draws off the global RNG that dropout uses."""
    return DataLoader(
        dataset,
        batch_size=batch_size,
        shuffle=True,
        collate_fn=collate_fn,
        generator=torch.Generator().manual_seed(seed),
    )


def parameter_groups(model: nn.Module, args: TrainingArguments, tisa_lr: float | None) -> list[dict[str, Any]]:
    """AdamW groups: weights with decay, biases and norms without, and TISA kernels at their own learning rate."""
    groups: dict[str, dict[str, Any]] = {
        "decay": {"params": [], "weight_decay": args.weight_decay},
        "no_decay": {"params": [], "weight_decay": 0.0},
        "tisa": {"params": [], "weight_decay": 0.0, "lr": args.learning_rate if tisa_lr is None else tisa_lr},
    }
    for name, parameter in model.named_parameters():
        if not parameter.requires_grad:
            continue
        if ".tisa." in f".{name}":
            key = "tisa"
        elif any(marker in name for marker in NO_DECAY):
            key = "no_decay"
        else:
            key = "decay"
        groups[key]["params"].append(parameter)
    return [group for group in groups.values() if group["params"]]


def build_optimizer(model: nn.Module, args: TrainingArguments, tisa_lr: float | None = None):
    optimizer = torch.optim.AdamW(parameter_groups(model, args, tisa_lr), lr=args.learning_rate, eps=args.adam_epsilon)
    scheduler = get_scheduler(
        "linear", optimizer, num_warmup_steps=args.warmup_steps, num_training_steps=args.max_steps
    )
    return optimizer, scheduler


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    """The newest complete checkpoint (its trainer state is written last)."""
    root = Path(output_dir, CHECKPOINTS_DIR)
    complete = [path.parent for path in root.glob(f"step-*/{TRAINER_STATE}")]
    return max(complete, key=lambda path: int(path.name.split("-")[1]), default=None)


def save_checkpoint(accelerator: Accelerator, output_dir: str | Path, state: TrainerState) -> None:
    """Model, optimizer, scheduler and RNG (Accelerate, safetensors weights), then the trainer state; older
    checkpoints are removed once the new one is complete."""
    directory = Path(output_dir, CHECKPOINTS_DIR, f"step-{state.step}")
    accelerator.save_state(str(directory), safe_serialization=True)
    if accelerator.is_main_process:
        (directory / TRAINER_STATE).write_text(json.dumps({"step": state.step, "history": state.history}))
        for old in Path(output_dir, CHECKPOINTS_DIR).glob("step-*"):
            if old != directory:
                shutil.rmtree(old)
    accelerator.wait_for_everyone()


def load_checkpoint(accelerator: Accelerator, checkpoint: Path) -> TrainerState:
    accelerator.load_state(str(checkpoint))
    saved = json.loads((checkpoint / TRAINER_STATE).read_text())
    return TrainerState(step=saved["step"], history=saved["history"])


@dataclass
class TrainingStage:
    """`steps` optimizer steps on batches of `dataloader`, epoch after epoch; `name` shows in the progress bar."""

    dataloader: DataLoader
    steps: int
    name: str = ""


def _batches_from(accelerator: Accelerator, dataloader: DataLoader, position: int) -> Iterable:
    """Micro-batches from `position` (counted over all epochs) on, epoch after epoch."""
    per_epoch = len(dataloader)
    epoch, skip = divmod(position, per_epoch)
    while True:
        dataloader.set_epoch(epoch)
        yield from accelerator.skip_first_batches(dataloader, skip) if skip else dataloader
        epoch, skip = epoch + 1, 0


def _staged_batches(
    accelerator: Accelerator, stages: Sequence[TrainingStage], position: int, accumulation: int
) -> Iterator[tuple[TrainingStage, Any]]:
    """(stage, micro-batch) from `position` (counted over all stages) on: each stage for its steps, in order.
    A stage entered mid-way (on resume) continues where its own count of micro-batches left off."""
    for stage in stages:
        size = stage.steps * accumulation
        if position < size:
            batches = _batches_from(accelerator, stage.dataloader, position)
            for _ in range(size - position):
                yield stage, next(batches)
        position = max(0, position - size)


def fit(
    accelerator: Accelerator,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scheduler: Any,
    train_data: DataLoader | Sequence[TrainingStage],
    evaluate: Evaluate,
    args: TrainingArguments,
) -> TrainerState:
    """Trains prepared objects for `args.max_steps` optimizer steps, resuming from the latest checkpoint when
    `args.resume`; returns the final state, whose history ends with the final evaluation.

    `train_data` is one data loader for all steps, or stages whose steps add up to `args.max_steps`; the
    learning-rate schedule runs over all of them. `model(**batch).loss` is the loss minimised."""
    stages = [TrainingStage(train_data, args.max_steps)] if isinstance(train_data, DataLoader) else train_data
    if sum(stage.steps for stage in stages) != args.max_steps:
        raise ValueError(f"The training stages add up to {sum(s.steps for s in stages)} steps, not {args.max_steps}.")
    state = TrainerState()
    if args.resume:
        checkpoint = latest_checkpoint(args.output_dir)
        if checkpoint is None:
            logger.warning("--resume: no checkpoint in %s, starting from scratch.", args.output_dir)
        else:
            state = load_checkpoint(accelerator, checkpoint)
            logger.info("Resumed from %s", checkpoint)
    accumulation = args.gradient_accumulation_steps
    progress = tqdm(
        total=args.max_steps, initial=state.step, desc="training", disable=not accelerator.is_local_main_process
    )
    model.train()
    running_loss, running_count = torch.zeros((), device=accelerator.device), 0
    batches = _staged_batches(accelerator, stages, state.step * accumulation, accumulation)
    while state.step < args.max_steps:
        stage, batch = next(batches)
        if stage.name:
            progress.set_description(f"training ({stage.name})", refresh=False)
        with accelerator.accumulate(model):
            loss = model(**batch).loss
            accelerator.backward(loss)
            if accelerator.sync_gradients and args.max_grad_norm > 0:
                accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        running_loss += loss.detach()
        running_count += 1
        if not accelerator.sync_gradients:
            continue
        state.step += 1
        progress.update(1)
        if args.logging_steps and state.step % args.logging_steps == 0:
            mean_loss = accelerator.reduce(running_loss, reduction="mean").item() / running_count
            accelerator.log({"train/loss": mean_loss, "train/lr": scheduler.get_last_lr()[0]}, step=state.step)
            progress.set_postfix(loss=f"{mean_loss:.4f}")
            running_loss.zero_()
            running_count = 0
        if state.step == args.max_steps or (args.eval_steps and state.step % args.eval_steps == 0):
            _evaluate(accelerator, model, evaluate, state)
        if args.checkpoint_steps and state.step % args.checkpoint_steps == 0 and state.step < args.max_steps:
            save_checkpoint(accelerator, args.output_dir, state)
    progress.close()
    if not state.history or state.history[-1]["step"] != state.step:
        _evaluate(accelerator, model, evaluate, state)
    return state


def _evaluate(accelerator: Accelerator, model: nn.Module, evaluate: Evaluate, state: TrainerState) -> None:
    model.eval()
    with torch.no_grad():
        metrics = evaluate()
    model.train()
    state.history.append({"step": state.step, "metrics": metrics})
    accelerator.log({f"eval/{name}": value for name, value in flatten_metrics(metrics).items()}, step=state.step)
    logger.info("step %d: %s", state.step, metrics)


def flatten_metrics(metrics: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """{"validation": {"accuracy": x}} -> {"validation/accuracy": x}."""
    flat = {}
    for name, value in metrics.items():
        if isinstance(value, dict):
            flat.update(flatten_metrics(value, f"{prefix}{name}/"))
        else:
            flat[f"{prefix}{name}"] = value
    return flat
