"""`tisa-hf sweep --config SWEEP.yaml`: every (task, variant, seed) run of a grid, one process launch each; with
`folds`, every (task, variant, fold, seed) run of a cross-validation.

Seeds are the outer loop, then folds: every (task, variant) runs its first seed before any runs its second, and
within a seed fold by fold, so a sweep stopped part-way leaves a balanced comparison (the same seeds and folds for
every configuration; after each seed, a whole cross-validation). Finished runs (their
metrics.json exists) are skipped and runs with a complete checkpoint are resumed, so a sweep that was killed
continues where it stopped when started again. A finished run whose recorded settings differ from what the sweep
now asks of it (an edited task config or variant) stops the sweep before anything runs: it would otherwise be
reported as a run of the new settings, and so does data a task's runs cannot read (a data_dir without the task's
files, or the Hub out of reach where no data_dir is set), once, rather than once a run. Sweep file keys:

    model: albert-base-v2            # any --model value
    output_dir: runs/table3a         # runs go to OUTPUT_DIR/TASK/VARIANT/seed-SEED
    config_dir: ../glue              # per-task configs CONFIG_DIR/TASK.yaml (relative to the sweep file)
    tasks: [rte, mrpc]
    seeds: [1, 2, 3, 4, 5]
    variants: {baseline: {}, s5-add: {tisa: {num_kernels: 5, mode: add}}}
    # a variant's settings for some tasks only (a control tuned on its own learning-rate grid):
    #   s0: {tisa: {num_kernels: 0, mode: replace}, per_task: {cola: {learning_rate: 1.0e-4}}}
    settings: {data_dir: path/to/glue}   # optional, for every run
    launcher: accelerate launch --num_processes 8   # optional; default: this Python
    command: classify                # optional: the run command, glue (default) or classify
    folds: [0, 1, 2, 3, 4]           # optional (classify): runs go to OUTPUT_DIR/TASK/VARIANT/fold-F/seed-SEED
    requires: {runs/adapt-minilm/s5-all: bash scripts/adapt_minilm.sh}   # optional: folders the runs read, and
                                     # what makes them; a missing one stops the sweep before anything runs

`--tasks`, `--seeds`, `--folds` and `--variants` run a part of the grid, in the same order and into the same
folders: several processes sharing one GPU, or several machines, each take a part (`tisa-hf sweep --config S.yaml
--seeds 1 --tasks cola &`); a learning-rate grid on one fold, then its chosen variants on every fold (the first
fold's runs are already done).
"""

from __future__ import annotations

import logging
import shlex
import subprocess
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from ..commands.registry import COMMANDS as REGISTRY
from ..commands.registry import load
from ..errors import UsageError
from ..finetune.arguments import parse_arguments, resolved_config
from ..finetune.run_folder import RunFolder, changed_settings
from .options import sweep_parser

logger = logging.getLogger(__name__)

REQUIRED_KEYS = ("model", "output_dir", "tasks", "seeds", "variants")
OPTIONAL_KEYS = ("config_dir", "settings", "launcher", "command", "folds", "requires")
PER_TASK_KEY = "per_task"
# The run commands a sweep launches, glue by default: their `python -m` module and argument dataclasses, from the
# command table.
SWEPT_COMMANDS = ("glue", "classify")
COMMANDS = {name: (REGISTRY[name].launcher, load(REGISTRY[name].options)) for name in SWEPT_COMMANDS}


@dataclass(frozen=True)
class PlannedRun:
    task: str
    variant: str
    seed: int
    output_dir: Path
    command: list[str]
    status: str  # "done", "resume" or "new"
    fold: int | None = None

    @property
    def label(self) -> str:
        fold = "" if self.fold is None else f" fold {self.fold}"
        return f"{self.task} {self.variant}{fold} seed {self.seed}"


def flatten(settings: dict[str, Any]) -> dict[str, Any]:
    """{"lr": 1e-5, "tisa": {"num_kernels": 3}} -> {"lr": 1e-5, "tisa.num_kernels": 3}."""
    flat = {}
    for key, value in settings.items():
        if isinstance(value, dict):
            flat.update(flatten({f"{key}.{inner}": inner_value for inner, inner_value in value.items()}))
        else:
            flat[key] = value
    return flat


def settings_to_flags(settings: dict[str, Any]) -> list[str]:
    """{"lr": 1e-5, "tisa": {"num_kernels": 3}} -> ["--lr", "1e-05", "--tisa.num_kernels", "3"]."""
    return [flag for key, value in flatten(settings).items() if value is not None for flag in (f"--{key}", str(value))]


def load_sweep(path: str | Path) -> dict[str, Any]:
    try:
        sweep = yaml.safe_load(Path(path).read_text()) or {}
    except FileNotFoundError as error:
        raise UsageError(f"Sweep file {path} does not exist.") from error
    missing = [key for key in REQUIRED_KEYS if key not in sweep]
    unknown = sorted(set(sweep) - set(REQUIRED_KEYS) - set(OPTIONAL_KEYS))
    if missing or unknown:
        raise UsageError(
            f"Sweep file {path}: missing key(s) {', '.join(missing) or '-'}, "
            f"unknown key(s) {', '.join(unknown) or '-'}; "
            f"it takes {', '.join(REQUIRED_KEYS)} and optionally {', '.join(OPTIONAL_KEYS)}."
        )
    if sweep.get("command", "glue") not in COMMANDS:
        raise UsageError(f"Sweep file {path}: command {sweep['command']!r} is not one of {', '.join(COMMANDS)}.")
    if sweep.get("folds") is not None and sweep.get("command", "glue") != "classify":
        raise UsageError(f"Sweep file {path}: folds are folds of document classification; set command: classify.")
    for variant, variant_settings in sweep["variants"].items():
        unknown_tasks = sorted(set((variant_settings or {}).get(PER_TASK_KEY) or {}) - set(sweep["tasks"]))
        if unknown_tasks:
            raise UsageError(
                f"Sweep file {path}: variant {variant} has {PER_TASK_KEY} settings for {', '.join(unknown_tasks)}, "
                f"not among its tasks ({', '.join(sweep['tasks'])})."
            )
    return sweep


def run_flags(sweep: dict[str, Any], variant_settings: dict[str, Any] | None, task: str) -> list[str]:
    """A run's flags for `task`, each option once: the sweep's model and settings, overridden by the variant's
    settings (a variant's own `model` included), overridden by its `per_task` settings for that task."""
    settings = dict(variant_settings or {})
    task_settings = (settings.pop(PER_TASK_KEY, None) or {}).get(task) or {}
    shared = {"model": sweep["model"], **(sweep.get("settings") or {})}
    return settings_to_flags({**flatten(shared), **flatten(settings), **flatten(task_settings)})


def run_status(folder: RunFolder) -> str:
    return "done" if folder.is_finished() else "resume" if folder.latest_checkpoint() is not None else "new"


def check_required_folders(sweep_path: str | Path, required: dict[str, str], unread: set[str] = frozenset()) -> None:
    """Every folder the sweep's runs read (`requires`: {folder: what makes it}, less `unread`: the models of only
    the variants left out of this part of the grid) exists; a UsageError names the first missing one and what
    makes it."""
    for folder, made_by in required.items():
        if folder not in unread and not Path(folder).is_dir():
            raise UsageError(
                f"Sweep file {sweep_path}: the model folder {folder} does not exist yet; make it first with "
                f"`{made_by}` (or set the path in the sweep file)."
            )


def plan(
    sweep_path: str | Path,
    tasks: Sequence[str] | None = None,
    seeds: Sequence[int] | None = None,
    folds: Sequence[int] | None = None,
    variants: Sequence[str] | None = None,
) -> list[PlannedRun]:
    """Every run of the grid (or of its `tasks`, `seeds`, `folds` and `variants`), seed by seed (then fold, task,
    variant), with its command line and whether it is done, to resume, or new."""
    sweep = load_sweep(sweep_path)
    if folds is not None and sweep.get("folds") is None:
        raise UsageError(f"Sweep file {sweep_path}: --folds, but the sweep has no folds.")
    for name, chosen in (("tasks", tasks), ("seeds", seeds), ("folds", folds), ("variants", variants)):
        unknown = [str(value) for value in chosen or () if value not in sweep[name]]
        if unknown:
            raise UsageError(
                f"Sweep file {sweep_path}: --{name} {', '.join(unknown)} not among its {name} "
                f"({', '.join(map(str, sweep[name]))})."
            )
    selected = {name: settings for name, settings in sweep["variants"].items() if variants is None or name in variants}
    models_read = {(settings or {}).get("model", sweep["model"]) for settings in selected.values()}
    models_left_out = {(settings or {}).get("model") for settings in sweep["variants"].values()} - models_read
    check_required_folders(sweep_path, sweep.get("requires") or {}, models_left_out)
    module, argument_types = COMMANDS[sweep.get("command", "glue")]
    config_dir = (Path(sweep_path).parent / sweep.get("config_dir", "../glue")).resolve()
    launcher = shlex.split(sweep["launcher"]) if sweep.get("launcher") else [sys.executable]
    task_configs = {task: config_dir / f"{task}.yaml" for task in sweep["tasks"] if tasks is None or task in tasks}
    for task_config in task_configs.values():
        if not task_config.is_file():
            raise UsageError(f"Sweep file {sweep_path}: no task config {task_config} (set config_dir).")
    fold_list = [None] if sweep.get("folds") is None else [f for f in sweep["folds"] if folds is None or f in folds]
    runs, conflicts, data_flags = [], [], {}
    for seed in (seed for seed in sweep["seeds"] if seeds is None or seed in seeds):
        for fold in fold_list:
            for task, task_config in task_configs.items():
                for variant, variant_settings in selected.items():
                    parts = [task, variant, *([] if fold is None else [f"fold-{fold}"]), f"seed-{seed}"]
                    output_dir = Path(sweep["output_dir"], *parts)
                    status = run_status(RunFolder(output_dir))
                    flags = ["--config", str(task_config)]
                    flags += run_flags(sweep, variant_settings, task)
                    flags += [] if fold is None else ["--fold", str(fold)]
                    flags += ["--seed", str(seed), "--output_dir", str(output_dir)]
                    if status != "done":
                        data_flags.setdefault(task, flags)
                    changes = finished_changes(output_dir, flags, argument_types) if status == "done" else []
                    if changes:
                        conflicts.append(f"{output_dir} ({'; '.join(changes)})")
                    command = [*launcher, "-m", module, *flags, *(["--resume"] if status == "resume" else [])]
                    runs.append(PlannedRun(task, variant, seed, output_dir, command, status, fold))
    if conflicts:
        raise UsageError(
            f"Sweep file {sweep_path}: finished run(s) were made with other settings than the sweep now gives them: "
            f"{', '.join(conflicts)}. Delete those runs to redo them, or give the sweep another output_dir."
        )
    for flags in data_flags.values():
        check_data(sweep_path, parse_arguments(argument_types, flags, prog="tisa-hf sweep"))
    return runs


def check_data(sweep_path: str | Path, settings: tuple[Any, ...]) -> None:
    """The data a task's runs read is there, checked once before the first run: each run would otherwise fail on
    it in turn. Local files (`data_dir`) must hold the task's files; without them GLUE comes from the Hub, which
    must answer (or, offline, its copy in the datasets cache is read)."""
    from ..common.hub_access import check_hub_dataset
    from ..finetune.glue.data import task_folder  # here: it imports datasets
    from ..finetune.task_tables import get_task

    data = next(value for value in settings if hasattr(value, "data_dir"))
    remedy = "set data_dir in the sweep file's settings to a local copy (docs/fine-tuning.md says how to get one)"
    if data.data_dir is None:
        if hasattr(data, "dataset_name"):
            check_hub_dataset(data.dataset_name, remedy)
        return
    if not Path(data.data_dir).is_dir():
        raise UsageError(f"Sweep file {sweep_path}: data_dir {data.data_dir} does not exist; {remedy}.")
    if hasattr(data, "dataset_name"):  # GLUE: the task's own files
        try:
            task_folder(Path(data.data_dir), get_task(data.task))
        except UsageError as error:
            raise UsageError(f"Sweep file {sweep_path}: {error}") from error


def finished_changes(output_dir: Path, flags: list[str], argument_types: tuple[type, ...]) -> list[str]:
    """`name: recorded -> planned` for each setting of the finished run in `output_dir` that `flags` now set
    otherwise (a UsageError naming the record when it cannot be read). Settings the record lacks (older
    versions) are not compared, nor step counts the flags leave to be resolved from epochs or a warm-up ratio."""
    recorded = RunFolder(output_dir).read_record(required=()).get("config") or {}
    planned = parse_arguments(argument_types, flags, prog="tisa-hf sweep")
    wanted = resolved_config(*planned)
    unresolved = planned[2].unresolved_step_settings()
    return changed_settings(recorded, wanted, skip=(*unresolved, *(set(wanted) - set(recorded))))


def main(argv: list[str] | None = None) -> int:
    options = sweep_parser().parse_args(argv)
    runs = plan(options.config, options.tasks, options.seeds, options.folds, options.variants)
    failed = []
    for index, run in enumerate(runs, start=1):
        label = f"[{index}/{len(runs)}] {run.label}"
        if options.dry_run or run.status == "done":
            print(f"{label}: {run.status}  {shlex.join(run.command)}")
            continue
        print(f"{label}: {'resuming' if run.status == 'resume' else 'starting'}", flush=True)
        started = time.perf_counter()
        returncode = subprocess.run(run.command, check=False).returncode
        if returncode == 0:
            print(f"{label}: finished in {(time.perf_counter() - started) / 60:.1f} min", flush=True)
        else:
            print(f"{label}: failed (exit code {returncode})", flush=True)
            failed.append(label)
    if failed:
        print(f"tisa-hf sweep: {len(failed)} run(s) failed: {'; '.join(failed)}", file=sys.stderr)
        return 1
    return 0
