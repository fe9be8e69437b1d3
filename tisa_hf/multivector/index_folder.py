"""A token-vector index's folder, the only code that knows its files: `index.json` (the settings, the model's
folder and fingerprint, the parts done and the totals), `shards/NNNNN.npy` (a part's documents' token vectors,
fp16, one row a token, documents one after another) with `shards/NNNNN-counts.npy` (each document's row count),
and `offsets.npy` (document d's rows are offsets[d] to offsets[d + 1] of the shards laid end to end), written when
every part is done.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import UsageError

INDEX_FILE = "index.json"
OFFSETS_FILE = "offsets.npy"
SHARDS_FOLDER = "shards"
MODEL_CONFIG_FILE = "config_sentence_transformers.json"
FINGERPRINTED = (".json", ".safetensors", ".txt")
WRITE_ONE = "write one with tisa-hf adapt --multi-vector or save_multi_vector_encoder"


def check_multi_vector_folder(path: str) -> Path:
    """`path` as a folder holding a sentence-transformers `MultiVectorEncoder`, checked from its files alone."""
    folder = Path(path)
    config = folder / MODEL_CONFIG_FILE
    model_type = json.loads(config.read_text(encoding="utf-8")).get("model_type") if config.is_file() else None
    if model_type != "MultiVectorEncoder":
        raise UsageError(f"{path} is not a MultiVectorEncoder folder (no {MODEL_CONFIG_FILE} saying so); {WRITE_ONE}.")
    return folder


def model_fingerprint(folder: Path) -> str:
    """A digest of the model's weights and settings files (modules, lengths, tokenizer): an index is searched with
    the model that built it, and a folder's path alone says nothing of what it holds now."""
    digest = hashlib.sha256()
    for file in sorted(folder.rglob("*")):
        if file.is_file() and file.suffix in FINGERPRINTED:
            digest.update(str(file.relative_to(folder)).encode())
            digest.update(file.read_bytes())
    return digest.hexdigest()


def vectors_path(out: Path, part: int) -> Path:
    return out / SHARDS_FOLDER / f"{part:05d}.npy"


def counts_path(out: Path, part: int) -> Path:
    return out / SHARDS_FOLDER / f"{part:05d}-counts.npy"


def finished_index(path: str) -> dict[str, Any]:
    """The record of the finished index in `path`; a folder without one, or with an unfinished one, is refused."""
    record_file = Path(path) / INDEX_FILE
    if not record_file.is_file():
        raise UsageError(f"{path} holds no index (no {INDEX_FILE}); build one with tisa-hf index.")
    record = json.loads(record_file.read_text(encoding="utf-8"))
    if not (Path(path) / OFFSETS_FILE).is_file():
        raise UsageError(
            f"{path} is an unfinished index ({record['documents']} documents so far); rerun tisa-hf index with its "
            "settings to finish it."
        )
    return record


def document_vectors(path: str, record: dict[str, Any]) -> Iterator[np.ndarray]:
    """Each document's (tokens, dim) fp16 vectors, in corpus order, one shard in memory at a time (memory-mapped)."""
    out = Path(path)
    for part in range(record["parts"]):
        vectors, counts = np.load(vectors_path(out, part), mmap_mode="r"), np.load(counts_path(out, part))
        starts = np.concatenate([[0], np.cumsum(counts)])
        for start, end in zip(starts[:-1], starts[1:], strict=True):
            yield vectors[start:end]
