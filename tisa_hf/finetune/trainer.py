"""A task-agnostic Accelerate training loop: AdamW with linear warm-up/decay, gradient accumulation, periodic
evaluation, keeping the best evaluation's model, resumable checkpoints and tracker logging. GLUE and SQuAD plug
in their model, data, an `evaluate` callback and the score that ranks evaluations; adaptation trains in stages (a
curriculum of data loaders, one after the other).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import math
import shutil
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from accelerate import Accelerator
from accelerate.state import AcceleratorState
from accelerate.utils import (
    RNG_STATE_NAME,
    DataLoaderConfiguration,
    GradientAccumulationPlugin,
    ProjectConfiguration,
    TorchDynamoPlugin,
    load,
)
from safetensors.torch import load_model, save_model
from torch import nn
from torch.utils.data import DataLoader, Dataset
from tqdm.auto import tqdm
from transformers import get_scheduler

from ..common.log_filters import dropping_records
from ..errors import UsageError, note_kept
from .arguments import TrainingArguments
from .finite import check_finite_metrics, check_finite_step
from .precision import check_mixed_precision, training_device
from .run_folder import TRAINER_STATE, RunFolder

logger = logging.getLogger(__name__)

NO_DECAY = ("bias", "LayerNorm.weight", "layer_norm.weight", "norm.weight")

Evaluate = Callable[[], dict[str, Any]]
Score = Callable[[dict[str, Any]], float]  # an evaluation's metrics -> the number that ranks it (higher is better)


@dataclass
class TrainerState:
    """What a checkpoint needs beyond Accelerate's state: the step reached, the evaluations so far and the best
    one (with --load_best_model_at_end), and the run's wall time. `metrics` is the evaluation of the model `fit`
    returns, `started` the `time.perf_counter()` at which this process began the run; neither is checkpointed.
    `earlier_wall_time_s` is the wall time of the run's earlier processes up to the checkpoint this one resumed
    from (None when that checkpoint predates the record, so the run's wall time is unknown)."""

    step: int = 0
    history: list[dict[str, Any]] = field(default_factory=list)
    best_step: int | None = None
    best_score: float | None = None
    earlier_wall_time_s: float | None = 0.0
    metrics: dict[str, Any] = field(default_factory=dict)
    started: float = field(default_factory=time.perf_counter)

    @property
    def model_step(self) -> int:
        """The step whose weights `fit` returns."""
        return self.step if self.best_step is None else self.best_step

    def wall_time_s(self) -> float | None:
        """The run's wall time so far, over every process that worked on it: what an interruption lost after the
        last checkpoint is not counted, so a resumed run reports what an uninterrupted one would have taken."""
        if self.earlier_wall_time_s is None:
            return None
        return self.earlier_wall_time_s + time.perf_counter() - self.started

    def checkpoint_fields(self) -> dict[str, Any]:
        return {
            "step": self.step,
            "history": self.history,
            "best_step": self.best_step,
            "best_score": self.best_score,
            "wall_time_s": self.wall_time_s(),
        }


def optimizer_steps_per_epoch(num_batches: int, accumulation: int) -> int:
    """As transformers' Trainer counts them: a partial accumulation at the end of an epoch is a step too."""
    return max(math.ceil(num_batches / accumulation), 1)


def resolve_schedule(args: TrainingArguments, num_batches: int) -> TrainingArguments:
    """`args` with `max_steps` and `warmup_steps` set to what the run does, as transformers' Trainer resolves them:
    ceil(num_train_epochs x optimizer steps per epoch) unless --max_steps is given, and ceil(warmup_ratio x steps)
    unless --warmup_steps > 0. `num_batches` is the training data loader's length (micro-batches per epoch).

    The loop below draws micro-batches back to back across epochs, so with an accumulation that does not divide
    the batches of an epoch, an epoch's worth of steps reaches a few micro-batches into the next epoch."""
    per_epoch = optimizer_steps_per_epoch(num_batches, args.gradient_accumulation_steps)
    max_steps = args.max_steps if args.max_steps is not None else math.ceil(args.num_train_epochs * per_epoch)
    warmup_steps = args.warmup_steps if args.warmup_steps > 0 else math.ceil(args.warmup_ratio * max_steps)
    return dataclasses.replace(args, max_steps=max_steps, warmup_steps=warmup_steps)


def build_accelerator(args: TrainingArguments) -> Accelerator:
    """One optimizer step consumes the same `train_batch_size` examples whatever the number of processes: each
    batch is split across processes (`split_batches`), and shuffling depends only on the seed and the epoch."""
    check_mixed_precision(args.mixed_precision, training_device())
    trackers = [name.strip() for name in args.report_to.split(",") if name.strip()]
    # Without --torch-compile, Accelerate's own default: `accelerate launch --dynamo_backend` (its environment).
    # Accelerate keeps its compile and precision settings process-wide, from the first Accelerator of the process:
    # a process that trains more than once (a notebook, the tests) would give a later run the first one's. Each run
    # starts from its own settings (the process group, PartialState, stays).
    AcceleratorState._reset_state()
    dynamo = None
    if args.torch_compile:
        dynamo = TorchDynamoPlugin(backend=args.torch_compile_backend, mode=args.torch_compile_mode)
    return Accelerator(
        mixed_precision=args.mixed_precision,
        dynamo_plugin=dynamo,
        gradient_accumulation_plugin=GradientAccumulationPlugin(
            num_steps=args.gradient_accumulation_steps, sync_with_dataloader=False
        ),
        dataloader_config=DataLoaderConfiguration(split_batches=True, use_seedable_sampler=True, data_seed=args.seed),
        log_with=None if args.no_tracking or not trackers else trackers,
        project_config=ProjectConfiguration(
            project_dir=args.output_dir, logging_dir=str(RunFolder(args.output_dir).logs_dir)
        ),
    )


def unwrapped(accelerator: Accelerator, model: nn.Module) -> nn.Module:
    """The model itself, out of Accelerate's wrappers and a compiled model's (whose state-dict keys would carry
    `_orig_mod.`): what is saved, loaded into and recorded."""
    return accelerator.unwrap_model(model, keep_torch_compile=False)


def micro_batch_size(args: TrainingArguments, num_processes: int) -> int:
    """Examples per data-loader batch (all processes together), checking that the global batch divides evenly."""
    size, remainder = divmod(args.train_batch_size, args.gradient_accumulation_steps)
    if remainder or size % num_processes:
        raise UsageError(
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
    """AdamW and the linear schedule; `args` must come from `resolve_schedule`."""
    if args.max_steps is None:
        raise ValueError("build_optimizer needs resolved settings: pass the arguments through resolve_schedule.")
    optimizer = torch.optim.AdamW(parameter_groups(model, args, tisa_lr), lr=args.learning_rate, eps=args.adam_epsilon)
    scheduler = get_scheduler(
        "linear", optimizer, num_warmup_steps=args.warmup_steps, num_training_steps=args.max_steps
    )
    return optimizer, scheduler


def save_checkpoint(accelerator: Accelerator, output_dir: str | Path, state: TrainerState) -> None:
    """Model, optimizer, scheduler and RNG (Accelerate, safetensors weights), then the trainer state; older
    checkpoints, and best models this one does not refer to, are removed once the new one is complete."""
    folder = RunFolder(output_dir)
    directory = folder.checkpoint_dir(state.step)
    # Accelerate's "Removed shared tensor" warning fires at every checkpoint of a model with tied weights (an MLM
    # decoder tied to the word embeddings): safetensors stores each shared tensor once, and safetensors'
    # `load_model`, which `load_state` uses, ties it back on resume (tests/test_adapt.py resumes an MLM run
    # exactly), so on this path it reports nothing wrong.
    with dropping_records("accelerate.utils.other", "Removed shared tensor"):
        accelerator.save_state(str(directory), safe_serialization=True)
    if accelerator.is_main_process:
        (directory / TRAINER_STATE).write_text(json.dumps(state.checkpoint_fields()))
        for old in folder.checkpoints():
            if old != directory:
                shutil.rmtree(old)
        prune_best_models(output_dir, keep={state.best_step})
        note_kept(folder.path, f"the checkpoint of step {state.step} in {directory}")
    accelerator.wait_for_everyone()


def check_rng_state(checkpoint: Path, num_processes: int, allow_unreadable: bool) -> None:
    """Raises unless every process's random-number state in `checkpoint` can be read, or warns loudly when
    `allow_unreadable`. Accelerate's `load_state` only logs at INFO when it cannot restore that state, and the
    resumed run then silently differs from an uninterrupted one. Every process checks every file, so that all
    of them come to the same decision."""
    for process_index in range(num_processes):
        path = checkpoint / f"{RNG_STATE_NAME}_{process_index}.pkl"
        try:
            states = load(path)  # accelerate's torch.load(weights_only=True), exactly as load_state reads it
            missing = [key for key in ("random_state", "numpy_random_seed", "torch_manual_seed") if key not in states]
            if missing:
                raise KeyError(f"no {', '.join(missing)}")
        except Exception as error:  # torch.load raises many kinds of error for a missing or damaged file
            reason = type(error).__name__ + (f": {str(error).strip().splitlines()[0]}" if str(error).strip() else "")
            if not allow_unreadable:
                raise UsageError(
                    f"--resume: the random-number state {path} cannot be read ({reason}), so the resumed run would "
                    "not reproduce an uninterrupted one. Pass --resume-without-rng-state to continue anyway, or "
                    "--overwrite-output-dir to start again from scratch."
                ) from error
            logger.warning(
                "RESUMING WITHOUT THE RANDOM-NUMBER STATE: %s cannot be read (%s). Dropout draws differ from here "
                "on, so this run will NOT reproduce an uninterrupted one.",
                path,
                reason,
            )


def load_checkpoint(accelerator: Accelerator, checkpoint: Path) -> TrainerState:
    accelerator.load_state(str(checkpoint))
    saved = json.loads((checkpoint / TRAINER_STATE).read_text())
    return TrainerState(
        step=saved["step"],
        history=saved["history"],
        best_step=saved["best_step"],
        best_score=saved["best_score"],
        earlier_wall_time_s=saved.get("wall_time_s"),  # absent from checkpoints written before it was recorded
    )


def prune_best_models(output_dir: str | Path, keep: set[int | None]) -> None:
    """Removes the saved best models other than those of the steps in `keep`.

    A new best model does not replace the one the latest checkpoint refers to until the next checkpoint is
    complete: a run killed in between resumes from that checkpoint and needs its best model."""
    for step, folder in RunFolder(output_dir).best_models().items():
        if step not in keep:
            shutil.rmtree(folder)


def _checkpointed_best_step(output_dir: str | Path) -> int | None:
    checkpoint = RunFolder(output_dir).latest_checkpoint()
    return None if checkpoint is None else json.loads((checkpoint / TRAINER_STATE).read_text()).get("best_step")


def _track_best(
    accelerator: Accelerator, model: nn.Module, state: TrainerState, score: Score, output_dir: str | Path
) -> None:
    """After an evaluation: when it beats the best so far (strictly, so ties keep the earlier model; NaN never
    wins), the model is saved as safetensors under checkpoints/best-step-N (on disk, so --resume keeps it)."""
    value = float(score(state.history[-1]["metrics"]))
    best = state.best_score
    if best is not None and (math.isnan(value) or not (math.isnan(best) or value > best)):
        return
    state.best_step, state.best_score = state.step, value
    if accelerator.is_main_process:
        path = RunFolder(output_dir).best_model_file(state.step)
        path.parent.mkdir(parents=True, exist_ok=True)
        save_model(unwrapped(accelerator, model), str(path))
        prune_best_models(output_dir, keep={state.step, _checkpointed_best_step(output_dir)})
    accelerator.wait_for_everyone()


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
    score: Score | None = None,
    resume_from: Path | None = None,
    started: float | None = None,
) -> TrainerState:
    """Trains prepared objects for `args.max_steps` optimizer steps (resolved by `resolve_schedule`), from the
    checkpoint `resume_from` when given (`plan_run` finds it). `model(**batch).loss` is the loss minimised.

    `train_data` is one data loader for all steps, or stages whose steps add up to `args.max_steps`; the
    learning-rate schedule runs over all of them. `started` is the `time.perf_counter()` at which this process
    began the run (loading included), for the wall time the state keeps; by default, the call of `fit`.

    Returns the final state: its history ends with the final evaluation. The model is left holding the run's
    result, the final weights or, with `args.load_best_model_at_end`, those of the evaluation with the highest
    `score` (`state.best_step`); `state.metrics` is that model's evaluation, and the last `evaluate()` call was
    made on it, so a callback that keeps its outputs holds that model's predictions.

    The progress bar shows on a terminal only (tqdm's `disable=None`); elsewhere, as in a log file, every
    logging step writes a plain log line instead."""
    if args.load_best_model_at_end and score is None:
        raise UsageError("--load_best_model_at_end needs a score that ranks the evaluations; this command has none.")
    stages = [TrainingStage(train_data, args.max_steps)] if isinstance(train_data, DataLoader) else train_data
    if sum(stage.steps for stage in stages) != args.max_steps:
        raise ValueError(f"The training stages add up to {sum(s.steps for s in stages)} steps, not {args.max_steps}.")
    state = TrainerState()
    if resume_from is not None:
        state = load_checkpoint(accelerator, resume_from)
        logger.info("Resumed from %s", resume_from)
    if started is not None:
        state.started = started
    if accelerator.is_main_process:
        prune_best_models(args.output_dir, keep={state.best_step})  # best models of a lost (or another) run
    accumulation = args.gradient_accumulation_steps
    progress = tqdm(
        total=args.max_steps,
        initial=state.step,
        desc="training",
        disable=None if accelerator.is_local_main_process else True,
    )
    plain_progress = progress.disable and accelerator.is_local_main_process
    model.train()
    running_loss, running_count = torch.zeros((), device=accelerator.device), 0
    batches = _staged_batches(accelerator, stages, state.step * accumulation, accumulation)
    while state.step < args.max_steps:
        stage, batch = next(batches)
        if stage.name:
            progress.set_description(f"training ({stage.name})", refresh=False)
        with accelerator.accumulate(model):
            loss = model(**batch).loss
            running_loss += loss.detach()
            running_count += 1
            accelerator.backward(loss)
            if accelerator.sync_gradients:
                check_finite_step(accelerator, model, running_loss, state.step + 1, args)
            if accelerator.sync_gradients and args.max_grad_norm > 0:
                accelerator.clip_grad_norm_(model.parameters(), args.max_grad_norm)
            optimizer.step()
            scheduler.step()
            optimizer.zero_grad()
        if not accelerator.sync_gradients:
            continue
        state.step += 1
        progress.update(1)
        if args.logging_steps and state.step % args.logging_steps == 0:
            mean_loss = accelerator.reduce(running_loss, reduction="mean").item() / running_count
            accelerator.log({"train/loss": mean_loss, "train/lr": scheduler.get_last_lr()[0]}, step=state.step)
            progress.set_postfix(loss=f"{mean_loss:.4f}")
            if plain_progress:
                logger.info("step %d/%d: training loss %.4f", state.step, args.max_steps, mean_loss)
            running_loss.zero_()
            running_count = 0
        if state.step == args.max_steps or (args.eval_steps and state.step % args.eval_steps == 0):
            _evaluate(accelerator, model, evaluate, state, args, score)
        if args.checkpoint_steps and state.step % args.checkpoint_steps == 0 and state.step < args.max_steps:
            save_checkpoint(accelerator, args.output_dir, state)
    progress.close()
    if not state.history or state.history[-1]["step"] != state.step:
        _evaluate(accelerator, model, evaluate, state, args, score)
    state.metrics = state.history[-1]["metrics"]
    if args.load_best_model_at_end and state.best_step != state.step:
        load_model(unwrapped(accelerator, model), str(RunFolder(args.output_dir).best_model_file(state.best_step)))
        logger.info("Loaded the best model, of step %d (score %s)", state.best_step, state.best_score)
        state.metrics = _run_evaluation(model, evaluate)  # its predictions, for the callback to keep
    return state


def _run_evaluation(model: nn.Module, evaluate: Evaluate) -> dict[str, Any]:
    model.eval()
    with torch.no_grad():
        metrics = evaluate()
    model.train()
    return metrics


def _evaluate(
    accelerator: Accelerator,
    model: nn.Module,
    evaluate: Evaluate,
    state: TrainerState,
    args: TrainingArguments,
    score: Score | None,
) -> None:
    metrics = _run_evaluation(model, evaluate)
    check_finite_metrics(metrics, state.step)
    state.history.append({"step": state.step, "metrics": metrics})
    accelerator.log({f"eval/{name}": value for name, value in flatten_metrics(metrics).items()}, step=state.step)
    logger.info("step %d: %s", state.step, metrics)
    if args.load_best_model_at_end:
        _track_best(accelerator, model, state, score, args.output_dir)


def flatten_metrics(metrics: dict[str, Any], prefix: str = "") -> dict[str, float]:
    """{"validation": {"accuracy": x}} -> {"validation/accuracy": x}."""
    flat = {}
    for name, value in metrics.items():
        if isinstance(value, dict):
            flat.update(flatten_metrics(value, f"{prefix}{name}/"))
        else:
            flat[f"{prefix}{name}"] = value
    return flat
