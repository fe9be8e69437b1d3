"""Differences between two models measured on the same blocks of text, with a bootstrap interval over the blocks.

A measure over all tokens is the sum of the blocks' sums over the sum of their weights (tokens for agreement,
masked tokens for the loss). Resampling blocks, the same ones for both models, gives the interval of the
difference: scipy's paired percentile bootstrap, with this ratio of sums as the statistic.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
from scipy import stats

CONFIDENCE = 0.95


def _difference_of_ratios(sums: np.ndarray, reference: np.ndarray, weights: np.ndarray, axis: int = -1) -> np.ndarray:
    return (sums.sum(axis) - reference.sum(axis)) / weights.sum(axis)


def paired_interval(
    samples: tuple[np.ndarray, ...], statistic: Callable, resamples: int, seed: int, vectorized: bool = False
) -> tuple[float, float]:
    """The 95% percentile-bootstrap interval of `statistic(*samples)`, resampling the samples' items together
    (paired): the same blocks, queries or pairs for both sides of a difference."""
    interval = stats.bootstrap(
        samples,
        statistic,
        paired=True,
        vectorized=vectorized,
        n_resamples=resamples,
        confidence_level=CONFIDENCE,
        method="percentile",
        rng=np.random.default_rng(seed),
    ).confidence_interval
    return float(interval.low), float(interval.high)


def paired_difference(
    sums: list[float], reference: list[float], weights: list[int], resamples: int = 1000, seed: int = 0
) -> dict[str, float | None]:
    """The measure of `sums` minus that of `reference` (both per block, over the same `weights`) and its 95%
    interval (none from a single block)."""
    sums_array, reference_array, weights_array = (
        np.asarray(values, dtype=float) for values in (sums, reference, weights)
    )
    difference = float(_difference_of_ratios(sums_array, reference_array, weights_array))
    if len(weights_array) < 2:
        return {"difference": difference, "low": None, "high": None}
    low, high = paired_interval(
        (sums_array, reference_array, weights_array), _difference_of_ratios, resamples, seed, vectorized=True
    )
    return {"difference": difference, "low": low, "high": high}


def paired_to(
    record: dict[str, Any], reference: str, resamples: int = 1000, seed: int = 0
) -> dict[str, dict[str, dict[str, dict[str, float | None] | None]]]:
    """Every other model of an lm-eval record against `reference`: per model, measure and length, the paired
    difference (None where either model has no number)."""
    base = record["models"][reference]["block_sums"]
    paired = {}
    for name, model in record["models"].items():
        if name == reference:
            continue
        paired[name] = {
            measure: {
                length: None
                if values is None or base[measure][length] is None
                else paired_difference(
                    values, base[measure][length], record["block_tokens"][length][measure], resamples, seed
                )
                for length, values in per_length.items()
            }
            for measure, per_length in model["block_sums"].items()
        }
    return paired
