"""Resumable result files of the evaluation commands, written one way: every file replaced atomically (a temporary
file, then os.replace), so a kill, a crash or a full disk leaves either the old file or the new one.

- `tisa-hf longembed`, `tisa-hf qmsum` and `tisa-hf sts`: a run's record (settings, per-system results, paired
  differences) is one JSON file, replaced after every finished cell, so a killed run keeps what it finished and a
  rerun with the same settings measures only what is missing (`resumable_record`, `write_record`). A retrieval
  system's scores of a cell (queries x documents) are kept beside it in `scores/`, so that a hybrid can fuse
  rankings measured in an earlier call.
- `tisa-hf lm-eval` (`FinishedCells`): an evaluation runs for hours; each cell's (one model at one length)
  per-block sums go to OUT/lm_eval_progress.json as soon as they are computed, with the settings they were
  computed under. A rerun with the same settings keeps the finished cells and computes the rest, and its results
  are those of an uninterrupted run. The file is removed once the results are written.

A rerun with other settings is refused unless --overwrite, since its numbers would mix two evaluations.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import re
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import UsageError, note_kept

logger = logging.getLogger(__name__)

# The record of a finished run or report, by the same name in a fine-tuning run folder and an analysis report
# folder (`tisa-hf compare` tells them apart by the model a run folder also holds)
METRICS_FILE = "metrics.json"
PROGRESS_FILE = "lm_eval_progress.json"
SCORES_FOLDER = "scores"
WORK_OWNER_FILE = "work.json"  # the --out a --work folder serves
# A cell's per-block sums per measure (None: not measurable there).
CellSums = dict[str, list[float] | None]


def check_writable(folder: Path) -> None:
    """Creates `folder` (and its parents) and writes a temporary file in it: a UsageError when either fails."""
    try:
        folder.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=folder):
            pass
    except OSError as error:
        raise UsageError(
            f"--out {folder} cannot be written ({error.strerror or error}); choose a folder you can create and "
            "write to."
        ) from error


def replace_atomically(path: Path, write: Callable[[Path], None]) -> None:
    """`write(temporary path)` next to `path`, then the temporary file replaces `path` in one step."""
    temporary = path.with_name(f".{path.stem}.partial{path.suffix}")  # the suffix tells matplotlib the format
    try:
        write(temporary)
        os.replace(temporary, path)
    finally:
        temporary.unlink(missing_ok=True)


def write_text_atomically(path: Path, text: str) -> None:
    replace_atomically(path, lambda temporary: temporary.write_text(text, encoding="utf-8"))


def _as_saved(value: Any) -> Any:
    """`value` as it reads back from JSON (tuples become lists), so that settings compare with saved ones."""
    return json.loads(json.dumps(value))


@dataclass
class FinishedCells:
    """The cells computed so far under `settings`, and the wall time spent on them by earlier, interrupted runs."""

    folder: Path
    settings: dict[str, Any]
    cells: dict[str, dict[str, CellSums]] = field(default_factory=dict)
    earlier_wall_time_s: float = 0.0
    started: float = field(default_factory=time.perf_counter)

    @property
    def path(self) -> Path:
        return self.folder / PROGRESS_FILE

    @classmethod
    def open(cls, folder: Path, settings: dict[str, Any], overwrite: bool, started: float) -> FinishedCells:
        """The cells an interrupted evaluation left in `folder`, when its settings are `settings` (none with
        `overwrite`); reads only, so that it can run before the other checks."""
        settings = _as_saved(settings)
        path = folder / PROGRESS_FILE
        if overwrite or not path.is_file():
            return cls(folder, settings, started=started)
        try:
            saved = json.loads(path.read_text(encoding="utf-8"))
            saved_settings, cells, wall_time = saved["settings"], saved["cells"], saved["wall_time_s"]
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise UsageError(
                f"{path} (an interrupted evaluation's results) cannot be read ({error}); pass --overwrite to start "
                "again, or choose another --out."
            ) from error
        missing = "(not set)"
        changes = [
            f"{name}: {saved_settings.get(name, missing)!r} -> {value!r}"
            for name, value in settings.items()
            if saved_settings.get(name, missing) != value
        ]
        if changes:
            raise UsageError(
                f"{folder} holds an unfinished evaluation with other settings ({'; '.join(changes)}); rerun with its "
                "settings to resume it, pass --overwrite to discard its results, or choose another --out."
            )
        return cls(folder, settings, cells, wall_time, started)

    def get(self, model: str, length: int) -> CellSums | None:
        return self.cells.get(model, {}).get(str(length))

    def wall_time_s(self) -> float:
        """Seconds spent on the evaluation, interrupted runs included."""
        return self.earlier_wall_time_s + time.perf_counter() - self.started

    def add(self, model: str, length: int, sums: CellSums) -> None:
        """Keeps a computed cell, on disk at once."""
        self.cells.setdefault(model, {})[str(length)] = sums
        record = {"settings": self.settings, "wall_time_s": self.wall_time_s(), "cells": self.cells}
        write_text_atomically(self.path, json.dumps(record))
        cells = sum(map(len, self.cells.values()))
        note_kept(self.path, f"{cells} finished cell{'s' * (cells > 1)} in {self.path}")

    def remove(self) -> None:
        """Once the results are written, the cells are in them."""
        self.path.unlink(missing_ok=True)


def check_out_folder(out: str, option: str = "--out") -> None:
    if Path(out).exists() and not Path(out).is_dir():
        raise UsageError(f"{option} {out} is a file; give a folder.")


def claim_finished_folder(out: Path, marker: str, what: str, overwrite: bool) -> None:
    """Before any model loads: an --out whose `marker` file (written last) says it holds a finished `what` is
    refused unless `overwrite`, whose marker is then removed, so that an interrupted new run does not look
    finished."""
    path = out / marker
    if not path.is_file():
        return
    if not overwrite:
        raise UsageError(f"--out {out} holds a finished {what} ({marker}); choose another --out or pass --overwrite.")
    path.unlink()


RESUME_REMEDY = "rerun with its settings to resume, or choose another --out, or pass --overwrite to start over."


def resumable_record(
    results: Path, wanted: dict[str, Any], overwrite: bool, what: str = "settings", remedy: str = RESUME_REMEDY
) -> dict[str, Any] | None:
    """The record in `results` to resume (None: none yet, or --overwrite); one of other settings is refused, the
    message naming them as `what` and saying `remedy`."""
    if not results.is_file() or overwrite:
        return None
    record = json.loads(results.read_text())
    old = record.get("settings", {})
    differ = [f"{key} {old.get(key)} -> {value}" for key, value in wanted.items() if old.get(key) != value]
    if differ:
        raise UsageError(f"{results} holds results of other {what} ({'; '.join(differ)}); {remedy}")
    return record


def write_record(record: dict[str, Any], results: Path) -> None:
    """The record, replaced whole (a kill mid-write leaves the previous one)."""
    results.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomically(results, record_text(record))


def record_text(value: Any, indent: str = "") -> str:
    """`value` as JSON indented by two spaces a level, as `json.dumps(value, indent=2)` but with each list of plain
    values (a system's per-query measures, say) on one line: a third of the size for records of many queries, and a
    line a list in their diffs."""
    inner = indent + "  "
    if isinstance(value, dict) and value:
        items = [f"{inner}{json.dumps(key)}: {record_text(item, inner)}" for key, item in value.items()]
    elif isinstance(value, list) and any(isinstance(item, dict | list) for item in value):
        items = [f"{inner}{record_text(item, inner)}" for item in value]
    else:
        return json.dumps(value)
    opening, closing = ("{", "}") if isinstance(value, dict) else ("[", "]")
    return f"{opening}\n" + ",\n".join(items) + f"\n{indent}{closing}"


def check_work_folder(work: Path, out: Path) -> None:
    """--work keeps what a rerun into --out rebuilds (document embeddings, scores), found by system and cell name
    alone: one work folder serves one --out, which it records (`WORK_OWNER_FILE`), so that a hybrid never fuses
    scores kept for a run of other settings. A UsageError where `work` serves another --out; reads only, so that it
    runs before anything is loaded or removed."""
    path = work / WORK_OWNER_FILE
    if work.resolve() == out.resolve() or not path.is_file():
        return
    kept_for = json.loads(path.read_text(encoding="utf-8"))["out"]
    if kept_for != str(out.resolve()):
        raise UsageError(
            f"--work {work} keeps the embeddings and scores of --out {kept_for}; give each --out a --work of its own."
        )


def claim_work_folder(work: Path, out: Path) -> None:
    """Creates `work` for `out` (`check_work_folder` first), recording the --out it serves."""
    check_work_folder(work, out)
    if work.resolve() != out.resolve():
        check_writable(work)
        write_text_atomically(work / WORK_OWNER_FILE, json.dumps({"out": str(out.resolve())}))


def file_name(system: str) -> str:
    """A file name for a system's spelling (paths and colons flattened; a digest keeps it unique)."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", system).strip("_")[-60:]
    return f"{readable}-{hashlib.sha256(system.encode()).hexdigest()[:8]}"


def save_array(path: Path, array: np.ndarray) -> None:
    """`array` as .npy, replaced whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    replace_atomically(path, lambda temporary: np.save(temporary, array))


def scores_path(out: Path, system: str, cell: str) -> Path:
    return out / SCORES_FOLDER / file_name(system) / f"{cell}.npy"
