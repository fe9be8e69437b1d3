"""How a token-vector index stores a vector:
- `float16` (2 bytes a number, the default; it moves a mean MaxSim score by about 1e-3);
- `int8` (1 byte a number plus a float32 scale a token: each vector's numbers rounded to 255 levels between minus
  and plus its largest magnitude, symmetric about 0 as normalised vectors are);
- `pqM`, product quantization (Jégou et al., 2011) by faiss: the vector cut into M sub-vectors, each stored as the
  byte naming the nearest of 256 centroids learned for its place by k-means, M bytes a token (pq64: 64 bytes for
  MiniLM's 384 numbers, against 768 in fp16). The centroids, the codebook, are learned once from the first part's
  vectors and kept beside the shards; MaxSim scores the vectors decoded from them.
"""

from __future__ import annotations

import logging
import re

import numpy as np

from ..errors import UsageError

logger = logging.getLogger(__name__)

DTYPES = ("float16", "int8", "pqM")
INT8_LEVELS = 127
PQ_PATTERN = re.compile(r"pq([1-9][0-9]*)")
PQ_BITS = 8  # a byte a sub-vector: 256 centroids
PQ_TRAINING_VECTORS = 65_536  # at most, drawn from the first part: 256 a centroid, as faiss advises
PQ_SEED = 0


def is_dtype(name: str) -> bool:
    """Whether `name` names a storage: float16, int8 or pqM, M a whole number."""
    return name in DTYPES[:2] or PQ_PATTERN.fullmatch(name) is not None


def pq_bytes(dtype: str) -> int | None:
    """M of a `pqM` storage; None for float16 and int8."""
    found = PQ_PATTERN.fullmatch(dtype)
    return int(found.group(1)) if found else None


def check_pq_dimension(dtype: str, dimension: int) -> None:
    """A `pqM` storage cuts a vector into M sub-vectors of equal length."""
    subvectors = pq_bytes(dtype)
    if subvectors is not None and dimension % subvectors:
        raise UsageError(
            f"--dtype {dtype} cuts a vector into {subvectors} sub-vectors, which does not divide the model's "
            f"{dimension} numbers; choose an M that does."
        )


def _quantizer(dimension: int, subvectors: int, codebook: np.ndarray | None = None):
    import faiss

    quantizer = faiss.ProductQuantizer(dimension, subvectors, PQ_BITS)
    if codebook is not None:
        faiss.copy_array_to_vector(np.ascontiguousarray(codebook, dtype=np.float32).ravel(), quantizer.centroids)
    return quantizer


def train_codebook(rows: np.ndarray, dtype: str) -> np.ndarray | None:
    """The (M, 256, dim / M) centroids of a `pqM` storage learned from (tokens, dim) `rows` (at most
    `PQ_TRAINING_VECTORS` of them, drawn with a fixed seed); None for float16 and int8, which learn nothing."""
    subvectors = pq_bytes(dtype)
    if subvectors is None:
        return None
    centroids = 2**PQ_BITS
    if len(rows) < centroids:
        raise UsageError(
            f"--dtype {dtype} learns {centroids} centroids from the first part's token vectors, which has "
            f"{len(rows)}; give a larger --part-size, or store float16 or int8."
        )
    import faiss

    picked = np.random.default_rng(PQ_SEED).permutation(len(rows))[:PQ_TRAINING_VECTORS]
    quantizer = _quantizer(rows.shape[1], subvectors)
    quantizer.cp.seed = PQ_SEED
    advised = centroids * quantizer.cp.min_points_per_centroid
    if len(picked) < advised:
        logger.warning(
            "--dtype %s learns its %d centroids a sub-vector from the first part's %d token vectors, fewer than the "
            "%d that faiss advises; the codebook is coarser than it could be (a larger --part-size gives it more).",
            dtype, centroids, len(picked), advised,
        )  # fmt: skip
    quantizer.cp.min_points_per_centroid = 0  # said once above, not by faiss once a sub-vector; it changes nothing else
    quantizer.train(np.ascontiguousarray(rows[np.sort(picked)], dtype=np.float32))
    return faiss.vector_to_array(quantizer.centroids).reshape(subvectors, centroids, -1)


def compress(rows: np.ndarray, dtype: str, codebook: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray | None]:
    """(codes, scales) of (tokens, dim) float32 `rows`: the rows themselves in fp16 (no scales), int8 codes and a
    scale a row, or a `pqM` storage's (tokens, M) bytes under its `codebook` (no scales)."""
    if dtype == "float16":
        return rows.astype(np.float16), None
    if dtype == "int8":
        scales = np.abs(rows).max(axis=1, keepdims=True).astype(np.float32) / INT8_LEVELS
        codes = np.rint(rows / np.where(scales == 0, 1, scales)).astype(np.int8)
        return codes, scales[:, 0]
    quantizer = _quantizer(rows.shape[1], len(codebook), codebook)
    return quantizer.compute_codes(np.ascontiguousarray(rows, dtype=np.float32)), None


def decompress(codes: np.ndarray, scales: np.ndarray | None, codebook: np.ndarray | None = None) -> np.ndarray:
    """The (tokens, dim) float32 rows `compress` stored (for `pqM`, each sub-vector's centroid)."""
    if codebook is not None:
        subvectors, _, width = codebook.shape
        return _quantizer(subvectors * width, subvectors, codebook).decode(np.ascontiguousarray(codes))
    rows = codes.astype(np.float32)
    return rows if scales is None else rows * scales[:, None]


def bytes_per_token(dimension: int, dtype: str) -> int:
    subvectors = pq_bytes(dtype)
    if subvectors is not None:
        return subvectors
    return dimension * np.dtype(dtype).itemsize + (np.dtype(np.float32).itemsize if dtype == "int8" else 0)
