"""The building blocks every training run shares (`tisa-hf glue`, `squad`, `classify`, `adapt`), as plain
functions that each task's `run` calls in one order, top to bottom as transformers' `run_glue.py` does: check
(`preflight.plan_run` and the task's own checks, before any weights load), start (`started_run`: the run folder's
writer lock, the seed), load (`load_model_and_tokenizer`), prepare the data on the main process first, resolve the
schedule into run_config.yaml (`resolve_settings`), wrap for the processes (`prepare_training`), train
(`trainer.fit`), record (`run_record`) and save (`finish_run`). The order matters: it is the order in which a run
draws from the random-number generators. A new task copies a `task.py` and edits its `run`. Also here: the
command-line wrapper (`command_main`).
"""

from __future__ import annotations

import gc
import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import replace
from typing import Any

import torch
from accelerate import Accelerator, PartialState
from accelerate.utils import set_seed
from torch.utils.data import DataLoader
from transformers import AutoTokenizer

from ..attaching import tisa_config_of
from ..common.head_loading import load_under_head
from ..common.hub_access import loading_errors, model_remedy
from ..common.machine import machine, versions
from ..common.model_cards import adaptation_of
from ..errors import UsageError, usage_errors
from .arguments import (
    TisaArguments,
    TrainingArguments,
    parse_arguments,
    resolved_config,
)
from .preflight import RunPlan
from .push import UploadError, push_run
from .run_folder import RunFolder
from .trainer import (
    TrainerState,
    TrainingStage,
    build_accelerator,
    build_optimizer,
    check_rng_state,
    micro_batch_size,
    optimizer_steps_per_epoch,
    resolve_schedule,
    unwrapped,
)

TrainData = DataLoader | list[TrainingStage]  # one loader for every step, or a curriculum's stages


def load_model_and_tokenizer(auto_class: type, plan: RunPlan, tisa_args: TisaArguments, **config: Any):
    """`auto_class.from_pretrained(--model, tisa=..., **config, **--config-overrides)` (TISA only when set) and the
    tokenizer, from where `plan_run` found them; a failed load is one line naming the way out."""
    taken = sorted(plan.config_overrides.keys() & config.keys())
    if taken:
        raise UsageError(f"--config-overrides: the run sets {', '.join(taken)} itself; leave it out of the overrides.")
    config.update(plan.config_overrides)
    with loading_errors(f"the tokenizer {plan.tokenizer.path}", model_remedy()):
        tokenizer = AutoTokenizer.from_pretrained(plan.tokenizer.path, local_files_only=plan.tokenizer.local_files_only)
    tisa = tisa_args.tisa_config()
    if tisa is not None:
        config["tisa"] = tisa
    with loading_errors(f"the model {plan.model.path}", model_remedy()), usage_errors():
        model = load_under_head(auto_class, plan.model.path, local_files_only=plan.model.local_files_only, **config)
    return model, tokenizer


@contextmanager
def started_run(args: TrainingArguments, plan: RunPlan) -> Iterator[tuple[Accelerator, int]]:
    """The accelerator and the data-loader batch size, for the whole run: checks the batch sizes and the
    checkpoint's random-number state, takes the run folder's writer lock (the main process, until the run ends),
    clears the folder for --overwrite-output-dir, creates it, seeds."""
    accelerator = build_accelerator(args)
    batch_size = micro_batch_size(args, accelerator.num_processes)
    if args.eval_batch_size % accelerator.num_processes:
        raise UsageError(
            f"eval_batch_size {args.eval_batch_size} must be a multiple of the {accelerator.num_processes} processes."
        )
    if plan.resume_from is not None:
        check_rng_state(plan.resume_from, accelerator.num_processes, args.resume_without_rng_state)
    folder = RunFolder(args.output_dir)
    with folder.writer_lock() if accelerator.is_main_process else nullcontext():
        if accelerator.is_main_process:
            if args.overwrite_output_dir:
                folder.clear()
            folder.create()
        accelerator.wait_for_everyone()
        set_seed(args.seed)
        yield accelerator, batch_size


def save_run_config(accelerator: Accelerator, plan: RunPlan, output_dir: str, config: dict[str, Any]) -> None:
    """Writes the resolved settings to run_config.yaml; a resumed run first checks that they are the saved ones
    (`check_resolved_schedule`: the step counts were unknown before the data was counted)."""
    folder = RunFolder(output_dir)
    if plan.resume_from is not None:
        folder.check_resolved_schedule(config, plan.setting_defaults)
    if accelerator.is_main_process:
        folder.write_run_config(config)


def resolve_settings(
    accelerator: Accelerator, plan: RunPlan, settings: tuple[Any, ...], num_batches: int | None
) -> tuple[TrainingArguments, dict[str, Any], int | None]:
    """Once the training data is loaded (`num_batches` micro-batches an epoch): the training arguments among the
    parsed `settings` with the step and warm-up counts resolved (`resolve_schedule`), the flat config of all the
    settings, written to run_config.yaml, and the optimizer steps per epoch. A curriculum (`num_batches` None) has
    its schedule resolved already and no epochs."""
    if num_batches is not None:
        settings = tuple(
            resolve_schedule(value, num_batches) if isinstance(value, TrainingArguments) else value
            for value in settings
        )
    args = next(value for value in settings if isinstance(value, TrainingArguments))
    config = resolved_config(*settings)
    save_run_config(accelerator, plan, args.output_dir, config)
    if num_batches is None:
        return args, config, None
    return args, config, optimizer_steps_per_epoch(num_batches, args.gradient_accumulation_steps)


def prepare_training(
    accelerator: Accelerator,
    model: torch.nn.Module,
    args: TrainingArguments,
    tisa_lr: float | None,
    train: TrainData,
    evaluation: dict[Any, DataLoader],
) -> tuple[torch.nn.Module, torch.optim.Optimizer, Any, TrainData, dict[Any, DataLoader]]:
    """AdamW and its schedule (`build_optimizer`, from the resolved `args`), then the model, optimizer, schedule,
    training loaders (one, or one per curriculum stage) and dev loaders by name, in that order, through
    `accelerator.prepare` (which places them on the device and shards the loaders over the processes); returns
    them in the shapes given."""
    optimizer, scheduler = build_optimizer(model, args, tisa_lr)
    stages = [train] if isinstance(train, DataLoader) else [stage.dataloader for stage in train]
    model, optimizer, scheduler, *loaders = accelerator.prepare(
        model, optimizer, scheduler, *stages, *evaluation.values()
    )
    train_loaders, dev_loaders = loaders[: len(stages)], loaders[len(stages) :]
    if isinstance(train, DataLoader):
        train = train_loaders[0]
    else:
        train = [replace(stage, dataloader=loader) for stage, loader in zip(train, train_loaders, strict=True)]
    return model, optimizer, scheduler, train, dict(zip(evaluation, dev_loaders, strict=True))


def init_trackers(accelerator: Accelerator, project: str, config: dict[str, Any]) -> None:
    """Starts the trackers with the settings as hyper-parameters (TensorBoard takes only numbers, strings and
    booleans, so None and lists are written as text)."""
    accelerator.init_trackers(
        project,
        config={
            key: value if isinstance(value, (bool, int, float, str)) else str(value) for key, value in config.items()
        },
    )


def run_record(
    task: str,
    trained_model: torch.nn.Module,
    args: TrainingArguments,
    state: TrainerState,
    accelerator: Accelerator,
    config: dict[str, Any],
    steps_per_epoch: int | None = None,  # None: adaptation, whose stages differ in length
) -> dict[str, Any]:
    """What metrics.json holds: settings, seed, the TISA settings of the model as trained (those the checkpoint
    carried or the flags gave), where an adapted checkpoint came from (`adaptation_of`), versions, the machine,
    every evaluation, the saved model's evaluation as `metrics` (the last one, or with --load_best_model_at_end the
    one of `best_step`), steps, and the wall time over every process that worked on the run
    (`TrainerState.wall_time_s`; None when unknown)."""
    model = unwrapped(accelerator, trained_model)
    tisa = tisa_config_of(model)
    return {
        "task": task,
        "model": config["model"],
        "tisa": tisa.to_dict() if tisa else None,
        "adapted": adaptation_of(model),
        "seed": args.seed,
        "metrics": state.metrics,
        "best_step": state.best_step,
        "history": state.history,
        "steps": state.step,
        "steps_per_epoch": steps_per_epoch,
        "num_processes": accelerator.num_processes,
        "wall_time_s": state.wall_time_s(),
        "versions": versions(),
        "machine": machine(accelerator.device),
        "config": config,
    }


def finish_run(
    accelerator: Accelerator,
    model: torch.nn.Module,
    tokenizer: Any,
    args: TrainingArguments,
    record: dict[str, Any],
    documents: dict[str, Any] | None = None,
) -> None:
    """Saves the model and tokenizer, the JSON `documents` ({file name: content}, e.g. dev predictions) and
    metrics.json, last, since it marks the run finished; drops the checkpoints, pushes to the Hub when asked, and
    ends the trackers (`command_main` ends the process group). A failed upload is raised once all that is done:
    the run is saved."""
    accelerator.wait_for_everyone()
    upload_error = None
    if accelerator.is_main_process:
        folder = RunFolder(args.output_dir)
        unwrapped(accelerator, model).save_pretrained(folder.path)
        tokenizer.save_pretrained(folder.path)
        for name, content in (documents or {}).items():
            folder.write_document(name, content)
        folder.write_record(record)
        folder.drop_checkpoints()
        if args.push_to_hub:
            try:
                push_run(folder.path, args.push_to_hub)
            except UploadError as error:
                upload_error = error
    accelerator.wait_for_everyone()
    for tracker in accelerator.trackers:  # the first half of `end_training`; `command_main` does the second
        tracker.finish()
    if upload_error is not None:
        raise upload_error


def command_main(
    prog: str,
    argument_types: tuple[type, ...],
    run: Callable[..., dict[str, Any]],
    argv: list[str] | None,
    closing: Callable[[dict[str, Any]], str | None] | None = None,
) -> int:
    """Parses `argv` into `argument_types` and calls `run` with them; prints a one-line JSON summary, then the
    line `closing` makes of the run's record, where it makes one. A wrong setting, run folder, model, data or
    upload raises UsageError (`tisa_hf.commands.cli` reports it)."""
    argv = sys.argv[1:] if argv is None else argv
    try:
        parsed = parse_arguments(argument_types, argv, prog=prog)
        record = run(*parsed)
    finally:
        # The process group goes last, once the run's DDP objects are gone (a TISA model holds reference cycles,
        # so they go at a collection): destroying a DDP reducer after its gloo group hangs in the group's threads.
        gc.collect()
        PartialState().destroy_process_group()
    output_dir = next(value.output_dir for value in parsed if isinstance(value, TrainingArguments))
    wall_time = record["wall_time_s"]
    summary = {
        "output_dir": output_dir,
        "metrics": record["metrics"],
        "wall_time_s": None if wall_time is None else round(wall_time, 1),
    }
    print(json.dumps(summary))
    line = closing(record) if closing else None
    if line:
        print(line)
    return 0
