"""The resumable results of the retrieval commands (`tisa-hf longembed`, `tisa-hf qmsum`), in one place.

A run's record (settings, per-system results, paired differences) is one JSON file, replaced whole after every
finished cell, so a killed run keeps what it finished and a rerun with the same settings measures only what is
missing. Each system's scores of a cell (queries x documents) are kept beside it in `scores/`, so that a hybrid
can fuse rankings measured in an earlier call.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from pathlib import Path
from typing import Any

import numpy as np

from ..adapt.paired_blocks import paired_difference
from ..errors import UsageError

SCORES_FOLDER = "scores"


def check_out_folder(out: str) -> None:
    if Path(out).exists() and not Path(out).is_dir():
        raise UsageError(f"--out {out} is a file; give a folder.")


def resumable_record(results: Path, wanted: dict[str, Any], overwrite: bool) -> dict[str, Any] | None:
    """The record in `results` to resume (None: none yet, or --overwrite); one of other settings is refused."""
    if not results.is_file() or overwrite:
        return None
    record = json.loads(results.read_text())
    old = record["settings"]
    differ = [f"{key} {old.get(key)} -> {value}" for key, value in wanted.items() if old.get(key) != value]
    if differ:
        raise UsageError(
            f"{results} holds results of other settings ({'; '.join(differ)}); rerun with its settings to resume, "
            "or choose another --out, or pass --overwrite to start over."
        )
    return record


def write_record(record: dict[str, Any], results: Path) -> None:
    """The record, replaced whole (a kill mid-write leaves the previous one)."""
    partial = results.with_name(f"{results.name}.partial")
    partial.write_text(json.dumps(record, indent=2))
    os.replace(partial, results)


def paired_per_query(values: list[float], reference: list[float], resamples: int, seed: int) -> dict[str, Any]:
    """The mean of `values` minus that of `reference` (per query, the same queries) with its 95% bootstrap
    interval over the queries (tisa_hf/adapt/paired_blocks.py with one query per block)."""
    return paired_difference(values, reference, [1] * len(values), resamples, seed)


def file_name(system: str) -> str:
    """A file name for a system's spelling (paths and colons flattened; a digest keeps it unique)."""
    readable = re.sub(r"[^A-Za-z0-9._-]+", "_", system).strip("_")[-60:]
    return f"{readable}-{hashlib.sha256(system.encode()).hexdigest()[:8]}"


def save_array(path: Path, array: np.ndarray) -> None:
    """`array` as .npy, replaced whole."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.stem}.partial.npy")
    np.save(partial, array)
    os.replace(partial, path)


def scores_path(out: Path, system: str, cell: str) -> Path:
    return out / SCORES_FOLDER / file_name(system) / f"{cell}.npy"
