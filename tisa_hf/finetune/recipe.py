"""The recipe every run shares (`tisa-hf glue`, `squad`, `classify`, `adapt`): a `Task` says what its kind of run adds
(data, model, evaluator, the score that ranks evaluations, documents to save) and `run_task` does the rest in one
order: check (`preflight.plan_run` and the task's own checks), start (the run folder's writer lock, the seed), load,
prepare, train (`trainer.fit`), record and save, upload. A new task is a `Task` subclass in a `*_task.py` module and
a `Command` in `tisa_hf/cli.py`. Also here: loading a model for a run, the metrics.json record and the command-line
wrapper.
"""

from __future__ import annotations

import gc
import json
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from typing import Any, Protocol

import torch
from accelerate import Accelerator, PartialState
from accelerate.utils import set_seed
from torch.utils.data import DataLoader
from transformers import AutoTokenizer, PreTrainedModel

from ..common.head_loading import load_under_head
from ..common.hub_access import loading_errors, model_remedy
from ..common.machine import machine, versions
from ..common.model_cards import adaptation_of
from ..errors import UsageError, usage_errors
from ..patching import tisa_config_of
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
    Score,
    TrainerState,
    TrainingStage,
    build_accelerator,
    build_optimizer,
    check_rng_state,
    fit,
    micro_batch_size,
    optimizer_steps_per_epoch,
    resolve_schedule,
)


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
) -> tuple[tuple[Any, ...], dict[str, Any], int | None]:
    """Once the training data is loaded (`num_batches` micro-batches an epoch): the parsed settings with the step
    and warm-up counts resolved (`resolve_schedule`), their flat config, written to run_config.yaml, and the
    optimizer steps per epoch. A curriculum (`num_batches` None) has its schedule resolved already and no epochs."""
    if num_batches is not None:
        settings = tuple(
            resolve_schedule(value, num_batches) if isinstance(value, TrainingArguments) else value
            for value in settings
        )
    args = next(value for value in settings if isinstance(value, TrainingArguments))
    config = resolved_config(*settings)
    save_run_config(accelerator, plan, args.output_dir, config)
    if num_batches is None:
        return settings, config, None
    return settings, config, optimizer_steps_per_epoch(num_batches, args.gradient_accumulation_steps)


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
    model = accelerator.unwrap_model(trained_model)
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
        accelerator.unwrap_model(model).save_pretrained(folder.path)
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


class Evaluator(Protocol):
    """A task's evaluation of the model being trained: the metrics of its dev data, {split or group: {name:
    value}}, over all processes. Built once per run (`Task.evaluator`) and called by `fit` at every evaluation; an
    evaluator may keep the latest call's outputs for the run's documents (GLUE's dev predictions)."""

    def __call__(self) -> dict[str, Any]: ...


@dataclass
class TaskData:
    """A task's prepared data: the training batches (one data loader, or stages of a curriculum) and the dev
    data loaders by name, in the order `Task.evaluator` receives them."""

    train: DataLoader | list[TrainingStage]
    evaluation: dict[Any, DataLoader]

    def loaders(self) -> list[DataLoader]:
        train = [self.train] if isinstance(self.train, DataLoader) else [stage.dataloader for stage in self.train]
        return [*train, *self.evaluation.values()]

    def replace_loaders(self, loaders: list[DataLoader]) -> None:
        """Puts the prepared (`accelerator.prepare`) loaders in place of the ones `loaders()` listed."""
        if isinstance(self.train, DataLoader):
            self.train, loaders = loaders[0], loaders[1:]
        else:
            for stage, loader in zip(self.train, loaders, strict=False):
                stage.dataloader = loader
            loaders = loaders[len(self.train) :]
        self.evaluation = dict(zip(self.evaluation, loaders, strict=True))


class Task:
    """What one kind of run (GLUE, SQuAD, adaptation; a new task next) adds to the shared recipe, `run_task`.

    The settings are the command's four parsed dataclasses (model, TISA, training and task arguments). A task
    checks everything it can and reads its data in `plan`, before any model loads; then `run_task` starts the
    run, calls `load_model`, `prepare_data` and `evaluator`, trains with `score` ranking the evaluations, and
    saves `trained_model`, with `documents` beside metrics.json. `name` is metrics.json's task, `project` the
    trackers' project."""

    name: str
    project: str
    score: Score | None = None

    def __init__(self, model_args: Any, tisa_args: Any, args: TrainingArguments, task_args: Any) -> None:
        self.model_args, self.tisa_args, self.args, self.task_args = model_args, tisa_args, args, task_args

    @property
    def settings(self) -> tuple[Any, ...]:
        return self.model_args, self.tisa_args, self.args, self.task_args

    def plan(self) -> RunPlan:
        """Checks the settings, the run folder, the model source and the data (read here); loads no weights."""
        raise NotImplementedError

    def load_model(self, plan: RunPlan, accelerator: Accelerator) -> tuple[torch.nn.Module, Any]:
        """The model to train and the tokenizer to save with it."""
        raise NotImplementedError

    def prepare_data(self, tokenizer: Any, batch_size: int) -> TaskData:
        """The data loaders (on the main process first: cached tokenization is shared)."""
        raise NotImplementedError

    def evaluator(self, accelerator: Accelerator, model: torch.nn.Module, loaders: dict[Any, DataLoader]) -> Evaluator:
        raise NotImplementedError

    def trained_model(self, model: torch.nn.Module) -> PreTrainedModel:
        """The model to save, from the trained (unwrapped) module."""
        return model

    def documents(
        self, record: dict[str, Any], model: PreTrainedModel, evaluator: Evaluator, state: TrainerState
    ) -> dict[str, Any]:
        """The JSON documents saved beside metrics.json ({file name: content}); may add to `record` first."""
        return {}


def run_task(task: Task) -> dict[str, Any]:
    """One run of `task`, the recipe every task shares: check (`Task.plan`), start (`started_run`: the writer
    lock, seed), load the model, prepare the data, resolve the schedule into run_config.yaml, train (`fit`),
    record and save (`finish_run`). Returns what it writes to metrics.json."""
    started = time.perf_counter()
    plan = task.plan()
    with started_run(task.args, plan) as (accelerator, batch_size):
        model, tokenizer = task.load_model(plan, accelerator)
        with accelerator.main_process_first():
            data = task.prepare_data(tokenizer, batch_size)
        num_batches = len(data.train) if isinstance(data.train, DataLoader) else None
        settings, config, steps_per_epoch = resolve_settings(accelerator, plan, task.settings, num_batches)
        task.model_args, task.tisa_args, task.args, task.task_args = settings
        args = task.args
        optimizer, scheduler = build_optimizer(model, args, task.tisa_args.tisa_lr)
        model, optimizer, scheduler, *loaders = accelerator.prepare(model, optimizer, scheduler, *data.loaders())
        data.replace_loaders(loaders)
        init_trackers(accelerator, task.project, config)
        evaluate = task.evaluator(accelerator, model, data.evaluation)
        state = fit(
            accelerator, model, optimizer, scheduler, data.train, evaluate, args, task.score,
            resume_from=plan.resume_from, started=started,
        )  # fmt: skip
        trained = task.trained_model(accelerator.unwrap_model(model))
        record = run_record(task.name, trained, args, state, accelerator, config, steps_per_epoch)
        documents = task.documents(record, trained, evaluate, state)
        finish_run(accelerator, trained, tokenizer, args, record, documents)
    return record


def command_main(
    prog: str,
    argument_types: tuple[type, ...],
    run: Callable[..., dict[str, Any]],
    argv: list[str] | None,
    closing: Callable[[dict[str, Any]], str | None] | None = None,
) -> int:
    """Parses `argv` into `argument_types` and calls `run` with them; prints a one-line JSON summary, then the
    line `closing` makes of the run's record, where it makes one. A wrong setting, run folder, model, data or
    upload raises UsageError (`tisa_hf.cli` reports it)."""
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
