"""`tisa-hf lm-eval`'s output folder: checked writable before any model loads, the finished cells (one model at
one length) kept as they are computed, and every file replaced atomically.

An evaluation runs for hours; a kill, a crash or a full disk must not lose what is done. Each cell's per-block
sums go to OUT/lm_eval_progress.json as soon as they are computed, with the settings they were computed under;
the file is replaced atomically (a temporary file, then os.replace), so a kill leaves either the old file or the
new one. A rerun with the same settings keeps the finished cells and computes the rest, and its results are those
of an uninterrupted run; one with other settings is refused unless --overwrite, since its numbers would mix two
evaluations. The file is removed once the results are written.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..errors import UsageError

logger = logging.getLogger(__name__)

PROGRESS_FILE = "lm_eval_progress.json"
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

    def remove(self) -> None:
        """Once the results are written, the cells are in them."""
        self.path.unlink(missing_ok=True)
