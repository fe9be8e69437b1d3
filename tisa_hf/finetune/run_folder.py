"""A fine-tuning run's folder: its files, its state (new, interrupted or finished), and the checks that keep a
resumed run the same run and a finished one untouched. `tisa-hf sweep` plans runs with it, and a run checks its
folder before it loads data or a model.
"""

from __future__ import annotations

import logging
import shutil
from pathlib import Path
from typing import Any

import yaml

from .predictions import PREDICTIONS_FILE

logger = logging.getLogger(__name__)

CHECKPOINTS_DIR = "checkpoints"
LOGS_DIR = "logs"
TRAINER_STATE = "trainer_state.json"
METRICS_FILE = "metrics.json"
RUN_CONFIG_FILE = "run_config.yaml"

# Settings a resumed run may change: where and how often it reports, checkpoints and uploads, and how it was
# started. Every other setting changes what the run computes, so a resumed run must keep it.
RESUME_SAFE_SETTINGS = (
    "output_dir",
    "logging_steps",
    "checkpoint_steps",
    "report_to",
    "no_tracking",
    "push_to_hub",
    "resume",
    "overwrite_output_dir",
    "resume_without_rng_state",
)
# Settings run_config.yaml holds resolved (`trainer.resolve_schedule`: from --num_train_epochs and --warmup_ratio,
# once the training data is counted) but the command line may leave unset (None, 0). Before the data is loaded
# an unset one cannot be compared; `check_resolved_schedule` compares it afterwards.
SCHEDULE_SETTINGS = ("max_steps", "warmup_steps")


def latest_checkpoint(output_dir: str | Path) -> Path | None:
    """The newest complete checkpoint (its trainer state is written last)."""
    root = Path(output_dir, CHECKPOINTS_DIR)
    complete = [path.parent for path in root.glob(f"step-*/{TRAINER_STATE}")]
    return max(complete, key=lambda path: int(path.name.split("-")[1]), default=None)


def is_finished(output_dir: str | Path) -> bool:
    return Path(output_dir, METRICS_FILE).is_file()


def changed_settings(saved: dict[str, Any], current: dict[str, Any], skip: tuple[str, ...] = ()) -> list[str]:
    """`name: saved -> current` for every setting outside `RESUME_SAFE_SETTINGS` and `skip` that differs."""
    names = (set(saved) | set(current)) - set(RESUME_SAFE_SETTINGS) - set(skip)
    missing = "(not set)"
    return [
        f"{name}: {saved.get(name, missing)!r} -> {current.get(name, missing)!r}"
        for name in sorted(names)
        if saved.get(name, missing) != current.get(name, missing)
    ]


def check_output_dir(output_dir: str | Path, config: dict[str, Any], resume: bool, overwrite: bool) -> Path | None:
    """What a run may do with `output_dir`; returns the checkpoint to resume from (None: start from scratch).

    Refused with a ValueError: training into a folder that holds a finished run or checkpoints unless `overwrite`
    (or, for checkpoints, `resume`); resuming with settings that differ from the saved run_config.yaml other
    than `RESUME_SAFE_SETTINGS`; `resume` together with `overwrite`.
    """
    output_dir = Path(output_dir)
    if resume and overwrite:
        raise ValueError("--resume continues a run and --overwrite-output-dir starts it again; pass one of them.")
    if overwrite:
        return None
    if is_finished(output_dir):
        raise ValueError(
            f"{output_dir} holds a finished run ({METRICS_FILE}); pass --overwrite-output-dir to train it again "
            "from scratch (its model and metrics are replaced), or choose another --output-dir."
        )
    checkpoint = latest_checkpoint(output_dir)
    if not resume:
        if checkpoint is not None:
            raise ValueError(
                f"{output_dir} holds checkpoints of an unfinished run; pass --resume to continue it, or "
                "--overwrite-output-dir to start again from scratch."
            )
        return None
    if checkpoint is None:
        logger.warning("--resume: no checkpoint in %s, starting from scratch.", output_dir)
        return None
    unresolved = tuple(name for name in SCHEDULE_SETTINGS if not config.get(name))
    _check_same_settings(output_dir, config, skip=unresolved)
    return checkpoint


def check_resolved_schedule(output_dir: str | Path, config: dict[str, Any]) -> None:
    """For a resumed run, once `resolve_schedule` has counted the data: a ValueError when the resolved step or
    warm-up count differs from the checkpointed run's (the training data changed size)."""
    _check_same_settings(Path(output_dir), config, skip=())


def _check_same_settings(output_dir: Path, config: dict[str, Any], skip: tuple[str, ...]) -> None:
    saved_path = output_dir / RUN_CONFIG_FILE
    if not saved_path.is_file():
        raise ValueError(
            f"--resume: {saved_path} is missing, so the settings of the checkpointed run are unknown; restore it, "
            "or pass --overwrite-output-dir to start again from scratch."
        )
    changes = changed_settings(yaml.safe_load(saved_path.read_text()) or {}, config, skip)
    if changes:
        raise ValueError(
            f"--resume: these settings differ from the run in {output_dir} ({RUN_CONFIG_FILE}), and a resumed run "
            f"must keep them: {'; '.join(changes)}. Use the saved values, or start a new run (another "
            f"--output-dir, or --overwrite-output-dir). Only {', '.join(RESUME_SAFE_SETTINGS)} may change."
        )


def clear_output_dir(output_dir: str | Path) -> None:
    """Removes a previous run's checkpoints (and best models), tracker logs, metrics and predictions, before training
    again from scratch into its folder (its saved model is replaced when the new run finishes)."""
    for folder in (CHECKPOINTS_DIR, LOGS_DIR):
        shutil.rmtree(Path(output_dir, folder), ignore_errors=True)
    for name in (METRICS_FILE, PREDICTIONS_FILE):
        Path(output_dir, name).unlink(missing_ok=True)
