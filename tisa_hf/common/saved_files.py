"""Files and folders on disk checked before work starts: a model folder's config.json and weights, a checkpoint's
files, a text file, an output folder; each problem is one UsageError naming the path.

A truncated download or copy otherwise fails deep inside a load, after the rest has loaded (half a minute for a
checkpoint under --resume), in a traceback that names no file, and transformers reports a broken config.json as
"not a valid JSON file" without saying where, or as a tokenizer problem when the tokenizer loads first. These
checks read only what tells a complete file from a damaged one: safetensors' header and its coverage of the file
(safetensors' own `safe_open`, which maps the file and reads no tensor), a torch archive's zip directory (at its
end, so a truncated file has none; nothing is unpickled) and JSON. Light on purpose (no torch), like hub_access.
"""

from __future__ import annotations

import json
import os
import zipfile
from pathlib import Path

from safetensors import SafetensorError, safe_open

from ..errors import UsageError

CONFIG_FILE = "config.json"
# Any of these makes a folder a tokenizer's: what `save_pretrained` writes (its config, the fast tokenizer's file),
# or a vocabulary alone, as older checkpoints ship it.
TOKENIZER_FILES = (
    "tokenizer_config.json",
    "tokenizer.json",
    "vocab.txt",
    "vocab.json",
    "spiece.model",
    "sentencepiece.bpe.model",
)
# An Accelerate checkpoint's files (`save_state` with safe_serialization): the models' weights, and the
# optimizers' and schedulers' states as torch archives. Its random-number states are checked, and may be
# skipped on request, by `finetune.trainer.check_rng_state`.
CHECKPOINT_WEIGHTS = "model*.safetensors"
CHECKPOINT_ARCHIVES = ("optimizer*.bin", "scheduler*.bin")


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__


def safetensors_damage(path: Path) -> str | None:
    """Why `path` is not a complete safetensors file, or None."""
    try:
        with safe_open(path, framework="numpy"):
            return None
    except (SafetensorError, OSError) as error:
        return _first_line(error)


def archive_damage(path: Path) -> str | None:
    """Why `path` is not a complete torch archive (a zip file), or None."""
    try:
        zipfile.ZipFile(path).close()
    except (zipfile.BadZipFile, OSError) as error:
        return _first_line(error)
    return None


def json_damage(path: Path) -> str | None:
    """Why `path` is not JSON, or None."""
    try:
        json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as error:  # ValueError: JSONDecodeError and UnicodeDecodeError
        return _first_line(error)
    return None


def read_text(path: str | Path) -> str:
    """The contents of a UTF-8 text file; a UsageError naming the file when it cannot be read as such."""
    path = Path(path)
    if not path.is_file():
        raise UsageError(f"Text file {path} {'is a folder' if path.is_dir() else 'does not exist'}.")
    try:
        return path.read_text(encoding="utf-8")
    except UnicodeDecodeError as error:
        raise UsageError(
            f"Text file {path} is not UTF-8 text (byte {error.object[error.start]:#04x} at offset {error.start}); "
            "give a plain-text file, or convert it to UTF-8."
        ) from error
    except OSError as error:
        raise UsageError(f"Text file {path} cannot be read ({error.strerror or error}).") from error


def check_output_folder(folder: str | Path, option: str) -> None:
    """Without creating anything (a refused run leaves no folder): a UsageError when `folder`, given as `option`,
    is a file, lies under one, or lies in a folder this user cannot write."""
    folder = Path(folder).absolute()
    existing = folder
    while not existing.exists():
        existing = existing.parent
    if not existing.is_dir():
        where = "is a file" if existing == folder else f"lies under the file {existing}"
        raise UsageError(f"{option} {folder} {where}; give a folder (it is created when missing).")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"{option} {folder} cannot be written (no write permission in {existing}); choose another.")


def check_model_folder(folder: str | Path) -> None:
    """A UsageError naming the file when a local model folder's config.json is not JSON or one of its safetensors
    weight files is incomplete."""
    folder = Path(folder)
    config = folder / CONFIG_FILE
    reason = json_damage(config) if config.is_file() else None
    if reason:
        raise UsageError(f"{config} is not valid JSON ({reason}); repair it, or re-save or re-download the model.")
    for weights in sorted(folder.glob("*.safetensors")):
        reason = safetensors_damage(weights)
        if reason:
            raise UsageError(
                f"{weights} is damaged or incomplete ({reason}); re-download the model, or re-save it with "
                "save_pretrained."
            )


def has_tokenizer(folder: str | Path) -> bool:
    """Whether a local model folder holds a tokenizer (a sentence-transformers folder holds its transformers
    checkpoint, tokenizer included, at its root)."""
    return any((Path(folder) / name).is_file() for name in TOKENIZER_FILES)


def check_checkpoint(folder: str | Path) -> None:
    """A UsageError, before --resume loads anything, when a checkpoint lacks its weights or optimizer state or one
    of its files is incomplete."""
    folder = Path(folder)
    remedy = "restore it (copy it again), or pass --overwrite-output-dir to start the run again from scratch"
    weights = sorted(folder.glob(CHECKPOINT_WEIGHTS))
    archives = sorted(path for pattern in CHECKPOINT_ARCHIVES for path in folder.glob(pattern))
    if not weights or not any(path.name.startswith("optimizer") for path in archives):
        raise UsageError(
            f"--resume: {folder} lacks its model weights or optimizer state ({CHECKPOINT_WEIGHTS}, "
            f"{CHECKPOINT_ARCHIVES[0]}); {remedy}."
        )
    checks = [(path, safetensors_damage) for path in weights] + [(path, archive_damage) for path in archives]
    checks += [(path, json_damage) for path in sorted(folder.glob("*.json"))]  # the trainer state
    for path, damage in checks:
        reason = damage(path)
        if reason:
            raise UsageError(f"--resume: {path} is damaged or incomplete ({reason}); {remedy}.")
