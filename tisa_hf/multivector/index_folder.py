"""A token-vector index's folder, the only code that knows its files: `index.json` (the settings, the model's
folder and fingerprint, the parts done and the totals), `shards/NNNNN.npy` (a part's documents' token vectors,
one row a token, documents one after another, stored as `compression.py` says: fp16, or int8 codes with
`shards/NNNNN-scales.npy`, or `pqM` codes under `codebook.npy`, learned from the first part) with
`shards/NNNNN-counts.npy` (each document's row count),
`offsets.npy` (document d's rows are offsets[d] to offsets[d + 1] of the shards laid end to end), `bm25/`
(bm25s' BM25 index of the documents' text, English stopwords removed, for `tisa-hf search --candidates`) and, where
the corpus gives its documents ids, `ids.json` (the ids in order), written when every part is done. With
--token-centroids, `token-candidates/` holds the approximate candidate stage
(`token_candidates.py`): `centroids.npy`, learned from the first part, each part's documents' centroids
(`NNNNN-centroids.npy` with `NNNNN-centroid-counts.npy`) and, once every part is done, the postings from centroids
to documents (`postings-starts.npy`, `postings-documents.npy`).
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import UsageError
from .compression import decompress, pq_bytes

INDEX_FILE = "index.json"
OFFSETS_FILE = "offsets.npy"
IDS_FILE = "ids.json"
SHARDS_FOLDER = "shards"
CODEBOOK_FILE = "codebook.npy"
TOKEN_CANDIDATES_FOLDER = "token-candidates"
MODEL_WEIGHTS_CONFIG = "config.json"
BM25_FOLDER = "bm25"
BM25_TOKENIZER = "english"
MODEL_CONFIG_FILE = "config_sentence_transformers.json"
FINGERPRINTED = (".json", ".safetensors", ".txt")
WRITE_ONE = "write one with tisa-hf adapt --multi-vector or save_multi_vector_encoder"


def check_multi_vector_folder(path: str) -> Path:
    """`path` as a folder holding a sentence-transformers `MultiVectorEncoder`, checked from its files alone."""
    folder = Path(path)
    if not folder.is_dir():
        raise UsageError(
            f"{path} {'is a file' if folder.exists() else 'does not exist'}; give a MultiVectorEncoder folder: "
            f"{WRITE_ONE}."
        )
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


def model_files(folder: Path) -> dict[str, list[int]]:
    """The size and modification time (ns) of each file `model_fingerprint` reads: an index records them with the
    fingerprint, so that a search finds the same files unchanged without reading them again."""
    return {
        str(file.relative_to(folder)): [file.stat().st_size, file.stat().st_mtime_ns]
        for file in sorted(folder.rglob("*"))
        if file.is_file() and file.suffix in FINGERPRINTED
    }


def is_index_model(folder: Path, record: dict[str, Any]) -> bool:
    """Whether `folder` holds the weights and settings the index in `record` was built with: its files unchanged
    since the index fingerprinted them (their sizes and times, as make and git compare files), or else the same
    fingerprint (a copied or touched folder is read again)."""
    files = model_files(folder)
    if record.get("model_files") == files:
        return True
    return _fingerprint_while(str(folder.resolve()), json.dumps(files)) == record["settings"]["model_sha256"]


@functools.lru_cache(maxsize=8)
def _fingerprint_while(folder: str, files: str) -> str:
    """`model_fingerprint` of `folder` while its files' sizes and times are `files`: the command line's check
    before torch is imported and the command's own check read the weights once."""
    return model_fingerprint(Path(folder))


def model_dimension(folder: Path) -> int:
    """The token vectors' length, from the encoder's config alone (the folder's Transformer module)."""
    return json.loads((folder / MODEL_WEIGHTS_CONFIG).read_text(encoding="utf-8"))["hidden_size"]


def codebook_path(out: Path) -> Path:
    return out / CODEBOOK_FILE


def centroids_path(out: Path) -> Path:
    return out / TOKEN_CANDIDATES_FOLDER / "centroids.npy"


def postings_path(out: Path, name: str) -> Path:
    return out / TOKEN_CANDIDATES_FOLDER / f"postings-{name}.npy"


def document_centroids_path(out: Path, part: int) -> Path:
    return out / TOKEN_CANDIDATES_FOLDER / f"{part:05d}-centroids.npy"


def centroid_counts_path(out: Path, part: int) -> Path:
    return out / TOKEN_CANDIDATES_FOLDER / f"{part:05d}-centroid-counts.npy"


def vectors_path(out: Path, part: int) -> Path:
    return out / SHARDS_FOLDER / f"{part:05d}.npy"


def counts_path(out: Path, part: int) -> Path:
    return out / SHARDS_FOLDER / f"{part:05d}-counts.npy"


def scales_path(out: Path, part: int) -> Path:
    return out / SHARDS_FOLDER / f"{part:05d}-scales.npy"


def write_ids(out: Path, ids: list[str | int] | None) -> None:
    """The documents' own ids, in order, where the corpus gave them."""
    if ids is not None:
        (out / IDS_FILE).write_text(json.dumps(ids), encoding="utf-8")


def stored_ids(path: str) -> list[str | int] | None:
    """The ids `write_ids` kept, or None."""
    file = Path(path) / IDS_FILE
    return json.loads(file.read_text(encoding="utf-8")) if file.is_file() else None


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


class StoredVectors(Sequence[np.ndarray]):
    """A finished index's token vectors, memory-mapped: `vectors[d]` is document d's (tokens, dim) rows, read from
    disk as they are used and returned as float32."""

    def __init__(self, path: str, record: dict[str, Any]) -> None:
        out = Path(path)
        self.offsets = np.load(out / OFFSETS_FILE)
        self.part_size = record["settings"]["part_size"]
        parts = range(record["parts"])
        self.shards = [np.load(vectors_path(out, part), mmap_mode="r") for part in parts]
        scaled = record["settings"]["dtype"] == "int8"
        self.scales = [np.load(scales_path(out, part), mmap_mode="r") if scaled else None for part in parts]
        self.codebook = np.load(codebook_path(out)) if pq_bytes(record["settings"]["dtype"]) else None

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, document: int) -> np.ndarray:
        part = document // self.part_size
        first = self.offsets[part * self.part_size]
        rows = slice(self.offsets[document] - first, self.offsets[document + 1] - first)
        scales = self.scales[part]
        return decompress(self.shards[part][rows], None if scales is None else scales[rows], self.codebook)
