"""A run's folder (`tisa-hf glue`, `squad`, `classify`, `adapt`), owned by one type, `RunFolder`: the name of every file
and folder in it, its state (new, interrupted or finished), the checks that keep a resumed run the same run and a
finished one untouched, clearing and creating it, reading and writing its records, and the lock that lets one writer
at a time work in it. Training, sweeps, reports and uploads reach a run's files only through it.

Layout:

    metrics.json            the run's record, written last: its presence marks the run finished
    run_config.yaml         the resolved settings, checked again by --resume
    predictions.json        the saved model's dev logits and labels (GLUE)
    config.json, model.safetensors, tokenizer files   the saved model (`save_pretrained`)
    checkpoints/step-N/     resumable checkpoints (Accelerate state + trainer_state.json, written last)
    checkpoints/best-step-N/model.safetensors         the best evaluation's weights (--load-best-model-at-end)
    logs/                   tracker logs (TensorBoard)
    writer.lock, writer.pid the writer lock and the process id of its holder
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from filelock import FileLock, Timeout

from ..common.result_files import METRICS_FILE
from ..errors import UsageError
from .finite import finite_json

logger = logging.getLogger(__name__)

RUN_CONFIG_FILE = "run_config.yaml"
PREDICTIONS_FILE = "predictions.json"
CHECKPOINTS_DIR = "checkpoints"
LOGS_DIR = "logs"
TRAINER_STATE = "trainer_state.json"
CHECKPOINT_PREFIX = "step-"
BEST_MODEL_PREFIX = "best-step-"
BEST_MODEL_FILE = "model.safetensors"
LOCK_FILE = "writer.lock"
LOCK_HOLDER_FILE = "writer.pid"
# What every reader of a record needs (a report's table); readers needing more name their own keys.
# The files that make a folder a sentence-transformers model, beside its module folders
SENTENCE_FILES = ("modules.json", "sentence_bert_config.json", "config_sentence_transformers.json")
# The run's model as a sentence-transformers MultiVectorEncoder (`tisa-hf adapt --multi-vector`), a folder of its own
MULTI_VECTOR_DIR = "multi-vector"
RECORD_KEYS = ("task", "model", "tisa", "metrics")
# The record of a document-classification run's data (`tisa-hf classify`): its source, classes and truncation. It
# marks such runs, whose metrics are per split (validation, test).
DOCUMENTS_KEY = "documents"

# Settings a resumed run may change: where and how often it reports, checkpoints and uploads, how it was
# started, and whether it is compiled (the same computation, rounded as the compiler fuses it). Every other
# setting changes what the run computes, so a resumed run must keep it.
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
    "torch_compile",
    "torch_compile_backend",
    "torch_compile_mode",
)
# Settings run_config.yaml holds resolved (`trainer.resolve_schedule`: from --num_train_epochs and --warmup_ratio,
# once the training data is counted) but the command line may leave unset (None, 0). Before the data is loaded
# an unset one cannot be compared; `RunFolder.check_resolved_schedule` compares it afterwards.
SCHEDULE_SETTINGS = ("max_steps", "warmup_steps")


def changed_settings(
    saved: dict[str, Any],
    current: dict[str, Any],
    skip: tuple[str, ...] = (),
    defaults: dict[str, Any] | None = None,
) -> list[str]:
    """`name: saved -> current` for every setting outside `RESUME_SAFE_SETTINGS` and `skip` that differs. A
    setting the saved run_config.yaml lacks counts as its default in `defaults`: a setting added to tisa-hf after
    the run started, left at the default that reproduces the old behaviour, does not block its resume."""
    missing = "(not set)"
    saved = {**{name: value for name, value in (defaults or {}).items() if name not in saved}, **saved}
    names = (set(saved) | set(current)) - set(RESUME_SAFE_SETTINGS) - set(skip)
    return [
        f"{name}: {saved.get(name, missing)!r} -> {current.get(name, missing)!r}"
        for name in sorted(names)
        if saved.get(name, missing) != current.get(name, missing)
    ]


@dataclass(frozen=True)
class RunFolder:
    """The folder of one run (`--output-dir`)."""

    path: Path

    def __init__(self, path: str | os.PathLike) -> None:
        object.__setattr__(self, "path", Path(path))

    # Names.
    @property
    def metrics_file(self) -> Path:
        return self.path / METRICS_FILE

    @property
    def run_config_file(self) -> Path:
        return self.path / RUN_CONFIG_FILE

    @property
    def predictions_file(self) -> Path:
        return self.path / PREDICTIONS_FILE

    @property
    def checkpoints_dir(self) -> Path:
        return self.path / CHECKPOINTS_DIR

    @property
    def logs_dir(self) -> Path:
        return self.path / LOGS_DIR

    def checkpoint_dir(self, step: int) -> Path:
        return self.checkpoints_dir / f"{CHECKPOINT_PREFIX}{step}"

    def best_model_dir(self, step: int) -> Path:
        return self.checkpoints_dir / f"{BEST_MODEL_PREFIX}{step}"

    def best_model_file(self, step: int) -> Path:
        return self.best_model_dir(step) / BEST_MODEL_FILE

    # State.
    def checkpoints(self) -> list[Path]:
        """Every checkpoint folder, complete or not."""
        return list(self.checkpoints_dir.glob(f"{CHECKPOINT_PREFIX}*"))

    def best_models(self) -> dict[int, Path]:
        """{step: folder} of the saved best models."""
        return {
            int(folder.name.removeprefix(BEST_MODEL_PREFIX)): folder
            for folder in self.checkpoints_dir.glob(f"{BEST_MODEL_PREFIX}*")
        }

    def latest_checkpoint(self) -> Path | None:
        """The newest complete checkpoint (its trainer state is written last)."""
        complete = [path.parent for path in self.checkpoints_dir.glob(f"{CHECKPOINT_PREFIX}*/{TRAINER_STATE}")]
        return max(complete, key=lambda path: int(path.name.removeprefix(CHECKPOINT_PREFIX)), default=None)

    def is_finished(self) -> bool:
        return self.metrics_file.is_file()

    # Checks.
    def check(
        self, config: dict[str, Any], resume: bool, overwrite: bool, defaults: dict[str, Any] | None = None
    ) -> Path | None:
        """What a run may do with this folder; returns the checkpoint to resume from (None: start from scratch).

        Refused with a UsageError: training into a folder that holds a finished run or checkpoints unless
        `overwrite` (or, for checkpoints, `resume`); resuming with settings that differ from the saved
        run_config.yaml other than `RESUME_SAFE_SETTINGS`; `resume` together with `overwrite`.
        """
        if resume and overwrite:
            raise UsageError("--resume continues a run and --overwrite-output-dir starts it again; pass one of them.")
        if overwrite:
            return None
        if self.is_finished():
            raise UsageError(
                f"{self.path} holds a finished run ({METRICS_FILE}); pass --overwrite-output-dir to train it again "
                "from scratch (its model and metrics are replaced), or choose another --output-dir."
            )
        checkpoint = self.latest_checkpoint()
        if not resume:
            if checkpoint is not None:
                raise UsageError(
                    f"{self.path} holds checkpoints of an unfinished run; pass --resume to continue it, or "
                    "--overwrite-output-dir to start again from scratch."
                )
            return None
        if checkpoint is None:
            logger.warning("--resume: no checkpoint in %s, starting from scratch.", self.path)
            return None
        unresolved = tuple(name for name in SCHEDULE_SETTINGS if not config.get(name))
        self._check_same_settings(config, skip=unresolved, defaults=defaults)
        return checkpoint

    def check_resolved_schedule(self, config: dict[str, Any], defaults: dict[str, Any] | None = None) -> None:
        """For a resumed run, once `resolve_schedule` has counted the data: a UsageError when the resolved step or
        warm-up count differs from the checkpointed run's (the training data changed size)."""
        self._check_same_settings(config, skip=(), defaults=defaults)

    def _check_same_settings(
        self, config: dict[str, Any], skip: tuple[str, ...], defaults: dict[str, Any] | None
    ) -> None:
        saved_path = self.run_config_file
        if not saved_path.is_file():
            raise UsageError(
                f"--resume: {saved_path} is missing, so the settings of the checkpointed run are unknown; restore "
                "it, or pass --overwrite-output-dir to start again from scratch."
            )
        changes = changed_settings(yaml.safe_load(saved_path.read_text()) or {}, config, skip, defaults)
        if changes:
            raise UsageError(
                f"--resume: these settings differ from the run in {self.path} ({RUN_CONFIG_FILE}), and a resumed run "
                f"must keep them: {'; '.join(changes)}. Use the saved values, or start a new run (another "
                f"--output-dir, or --overwrite-output-dir). Only {', '.join(RESUME_SAFE_SETTINGS)} may change."
            )

    # Clearing and creating.
    def clear(self) -> None:
        """Removes a previous run's checkpoints (and best models), tracker logs, metrics and predictions, before
        training again from scratch into the folder (its saved model is replaced when the new run finishes), and
        its sentence-transformers files: a new run that writes none would otherwise leave the folder loading as
        the old pipeline (its pooling, its `max_seq_length`), and its multi-vector model, the old weights."""
        for folder in (
            self.checkpoints_dir,
            self.logs_dir,
            self.multi_vector_dir,
            *self.sentence_transformers_modules(),
        ):
            shutil.rmtree(folder, ignore_errors=True)
        for path in (self.metrics_file, self.predictions_file, *(self.path / name for name in SENTENCE_FILES)):
            path.unlink(missing_ok=True)

    @property
    def multi_vector_dir(self) -> Path:
        return self.path / MULTI_VECTOR_DIR

    def sentence_transformers_modules(self) -> list[Path]:
        """The module folders the run folder's modules.json names (`1_Pooling`, ...), inside the folder."""
        try:
            modules = json.loads((self.path / "modules.json").read_text())
        except (OSError, ValueError):
            return []
        folders = [self.path / str(module.get("path", "")) for module in modules if isinstance(module, dict)]
        inside = self.path.resolve()
        return [folder for folder in folders if folder.resolve() != inside and folder.resolve().parent == inside]

    def create(self) -> None:
        self.path.mkdir(parents=True, exist_ok=True)

    def drop_checkpoints(self) -> None:
        """Once the run is saved: its checkpoints and best models are no longer needed."""
        shutil.rmtree(self.checkpoints_dir, ignore_errors=True)

    # Records.
    def read_record(self, required: Sequence[str] = RECORD_KEYS) -> dict[str, Any]:
        """The run's metrics.json, with the keys `required`; a UsageError naming the file when it is missing,
        not valid JSON, not an object, or lacks one of them."""
        path = self.metrics_file
        if not path.is_file():
            raise UsageError(f"{path} not found; a run directory holds the model, tokenizer and {METRICS_FILE}.")
        try:
            record = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as error:
            raise UsageError(
                f"{path}: not valid JSON at line {error.lineno}, column {error.colno}: {error.msg}."
            ) from error
        if not isinstance(record, dict):
            raise UsageError(f"{path} holds a JSON {type(record).__name__}, not a run's record (an object).")
        missing = [key for key in required if key not in record]
        if missing:
            raise UsageError(f"{path} lacks {', '.join(missing)}; it needs the keys {', '.join(required)}.")
        return record

    def write_record(self, record: dict[str, Any]) -> None:
        """metrics.json, in standard JSON (`finite_json`); written last, since it marks the run finished."""
        self.metrics_file.write_text(finite_json(record, METRICS_FILE, indent=2))

    def write_run_config(self, config: dict[str, Any]) -> None:
        self.run_config_file.write_text(yaml.safe_dump(config, sort_keys=False))

    def write_document(self, name: str, content: Any) -> None:
        """A JSON document of the run (e.g. predictions.json) by its file name, in standard JSON (`finite_json`)."""
        (self.path / name).write_text(finite_json(content, name))

    # The writer lock.
    @contextmanager
    def writer_lock(self) -> Iterator[None]:
        """Holds the folder for one writer: a second run into it is refused with a UsageError naming the process
        that holds it. The lock is an OS lock on writer.lock (`filelock.FileLock`, flock), which the system
        releases when its holder dies, so a killed run's folder is taken over by the next run without a stale
        lock to remove; writer.pid says who holds it, for the message."""
        self.create()
        lock = FileLock(self.path / LOCK_FILE, timeout=0)
        holder_file = self.path / LOCK_HOLDER_FILE
        try:
            lock.acquire()
        except Timeout as error:
            holder = holder_file.read_text().strip() if holder_file.is_file() else "unknown"
            raise UsageError(
                f"{self.path} is being written by another run (process {holder}); wait for it to end, or choose "
                "another --output-dir."
            ) from error
        try:
            holder_file.write_text(str(os.getpid()))
            yield
        finally:
            holder_file.unlink(missing_ok=True)
            lock.release()
