"""How a token-vector index stores a vector: `float16` (2 bytes a number, the default; it moves a mean MaxSim score by
about 1e-3) or `int8` (1 byte a number plus a float32 scale a token: each vector's numbers rounded to 255 levels
between minus and plus its largest magnitude, symmetric about 0 as normalised vectors are)."""

from __future__ import annotations

import numpy as np

DTYPES = ("float16", "int8")
INT8_LEVELS = 127


def compress(rows: np.ndarray, dtype: str) -> tuple[np.ndarray, np.ndarray | None]:
    """(codes, scales) of (tokens, dim) float32 `rows`: the rows themselves in fp16 (no scales), or int8 codes and a
    scale a row."""
    if dtype == "float16":
        return rows.astype(np.float16), None
    scales = np.abs(rows).max(axis=1, keepdims=True).astype(np.float32) / INT8_LEVELS
    codes = np.rint(rows / np.where(scales == 0, 1, scales)).astype(np.int8)
    return codes, scales[:, 0]


def decompress(codes: np.ndarray, scales: np.ndarray | None) -> np.ndarray:
    """The (tokens, dim) float32 rows `compress` stored."""
    rows = codes.astype(np.float32)
    return rows if scales is None else rows * scales[:, None]


def bytes_per_token(dimension: int, dtype: str) -> int:
    return dimension * np.dtype(dtype).itemsize + (np.dtype(np.float32).itemsize if dtype == "int8" else 0)
