"""What every fine-tuning command shares: model loading, the run folder (run_config.yaml, metrics.json, the saved
model, the upload), the summary record and the command-line wrapper. The task modules (GLUE, SQuAD) add data and
metrics; `plan.plan_run` checks a run before any of this."""

from __future__ import annotations

import gc
import json
import shutil
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import yaml
from accelerate import Accelerator, PartialState
from accelerate.utils import set_seed
from transformers import AutoTokenizer, PreTrainedModel

from ..cli import configure_logging
from ..environment import machine, versions
from ..hub import UploadError, push_run
from ..hub_access import loading_errors, model_remedy
from ..patching import tisa_config_of
from .arguments import (
    TisaArguments,
    TrainingArguments,
    parse_arguments,
    resolved_config,
)
from .finite import finite_json
from .loading import load_under_head
from .plan import RunPlan
from .run_folder import CHECKPOINTS_DIR, METRICS_FILE, RUN_CONFIG_FILE, check_resolved_schedule, clear_output_dir
from .trainer import (
    TrainerState,
    build_accelerator,
    check_rng_state,
    micro_batch_size,
    optimizer_steps_per_epoch,
    resolve_schedule,
)


def load_model_and_tokenizer(auto_class: type, plan: RunPlan, tisa_args: TisaArguments, **config: Any):
    """`auto_class.from_pretrained(--model, tisa=..., **config)` (TISA only when set) and the tokenizer, from
    where `plan_run` found them; a failed load is one line naming the way out."""
    with loading_errors(f"the tokenizer {plan.tokenizer.path}", model_remedy()):
        tokenizer = AutoTokenizer.from_pretrained(plan.tokenizer.path, local_files_only=plan.tokenizer.local_files_only)
    tisa = tisa_args.tisa_config()
    if tisa is not None:
        config["tisa"] = tisa
    with loading_errors(f"the model {plan.model.path}", model_remedy()):
        model = load_under_head(auto_class, plan.model.path, local_files_only=plan.model.local_files_only, **config)
    return model, tokenizer


def start_run(args: TrainingArguments, plan: RunPlan) -> tuple[Accelerator, int]:
    """The accelerator and the data-loader batch size; checks the batch sizes and the checkpoint's random-number
    state, clears the folder for --overwrite-output-dir, creates the run folder, seeds."""
    accelerator = build_accelerator(args)
    batch_size = micro_batch_size(args, accelerator.num_processes)
    if args.eval_batch_size % accelerator.num_processes:
        raise ValueError(
            f"eval_batch_size {args.eval_batch_size} must be a multiple of the {accelerator.num_processes} processes."
        )
    if plan.resume_from is not None:
        check_rng_state(plan.resume_from, accelerator.num_processes, args.resume_without_rng_state)
    if accelerator.is_main_process:
        if args.overwrite_output_dir:
            clear_output_dir(args.output_dir)
        Path(args.output_dir).mkdir(parents=True, exist_ok=True)
    accelerator.wait_for_everyone()
    set_seed(args.seed)
    return accelerator, batch_size


def save_run_config(accelerator: Accelerator, plan: RunPlan, output_dir: str, config: dict[str, Any]) -> None:
    """Writes the resolved settings to run_config.yaml; a resumed run first checks that they are the saved ones
    (`check_resolved_schedule`: the step counts were unknown before the data was counted)."""
    if plan.resume_from is not None:
        check_resolved_schedule(output_dir, config)
    if accelerator.is_main_process:
        (Path(output_dir) / RUN_CONFIG_FILE).write_text(yaml.safe_dump(config, sort_keys=False))


def resolve_settings(
    accelerator: Accelerator, plan: RunPlan, settings: tuple[Any, ...], num_batches: int
) -> tuple[tuple[Any, ...], dict[str, Any], int]:
    """Once the training data is loaded (`num_batches` micro-batches an epoch): the parsed settings with the step
    and warm-up counts resolved (`resolve_schedule`), their flat config, written to run_config.yaml, and the
    optimizer steps per epoch."""
    settings = tuple(
        resolve_schedule(value, num_batches) if isinstance(value, TrainingArguments) else value for value in settings
    )
    args = next(value for value in settings if isinstance(value, TrainingArguments))
    config = resolved_config(*settings)
    save_run_config(accelerator, plan, args.output_dir, config)
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


# The config.json key of an adapted checkpoint's provenance: in the config, it travels with the weights (to the
# Hub and into every model fine-tuned from them), where a side file would be left behind.
ADAPTED_CONFIG_KEY = "tisa_adapted"


def mark_adapted(model: PreTrainedModel, source: str, objective: str, train: str) -> None:
    """Records in `model`'s config that `tisa-hf adapt` made it from `source` with `objective`, training `train`."""
    setattr(model.config, ADAPTED_CONFIG_KEY, {"from": source, "objective": objective, "train": train})


def adaptation_of(model: PreTrainedModel) -> dict[str, Any] | None:
    """How `tisa-hf adapt` made `model` (the model it started from, objective and what it trained), or None.
    Runs fine-tuned from it record this, so that a report compares them with runs of the model they started
    from."""
    return getattr(model.config, ADAPTED_CONFIG_KEY, None)


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
    texts = {name: finite_json(content, name) for name, content in (documents or {}).items()}
    texts[METRICS_FILE] = finite_json(record, METRICS_FILE, indent=2)  # last: it marks the run finished
    accelerator.wait_for_everyone()
    upload_error = None
    if accelerator.is_main_process:
        output_dir = Path(args.output_dir)
        accelerator.unwrap_model(model).save_pretrained(output_dir)
        tokenizer.save_pretrained(output_dir)
        for name, text in texts.items():
            (output_dir / name).write_text(text)
        shutil.rmtree(output_dir / CHECKPOINTS_DIR, ignore_errors=True)
        if args.push_to_hub:
            try:
                push_run(output_dir, args.push_to_hub)
            except UploadError as error:
                upload_error = error
    accelerator.wait_for_everyone()
    for tracker in accelerator.trackers:  # the first half of `end_training`; `command_main` does the second
        tracker.finish()
    if upload_error is not None:
        raise upload_error


def command_main(
    prog: str, argument_types: tuple[type, ...], run: Callable[..., dict[str, Any]], argv: list[str] | None
) -> int:
    """Parses `argv` into `argument_types` and calls `run` with them; prints a one-line JSON summary, or the
    error (exit status 2) when the settings, run folder, model, data or upload are wrong."""
    argv = sys.argv[1:] if argv is None else argv
    configure_logging()
    try:
        parsed = parse_arguments(argument_types, argv, prog=prog)
        record = run(*parsed)
    except ValueError as error:
        print(f"{prog}: {error}", file=sys.stderr)
        return 2
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
    return 0
