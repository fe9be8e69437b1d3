"""Paired differences and their bootstrap intervals, in one place.

Between two models measured on the same blocks of text (`lm-eval`), queries (`longembed`, `qmsum`) or pairs
(`sts`): a measure over all items is the sum of the items' sums over the sum of their weights (tokens for
agreement, masked tokens for the loss, one per query). Resampling items, the same ones for both models, gives the
interval of the difference: scipy's paired percentile bootstrap, with this ratio of sums as the statistic.

Between two fine-tuned variants scored on the same dev examples over several seeds (`tisa-hf report`,
`paired_bootstrap`): hand-written because `scipy.stats.bootstrap` resamples one level only (paired observations);
here each replicate draws one set of dev examples, used for both sides of every pair, and a set of seeds among
those both variants have, so the interval covers the spread of dev sets and of training seeds together.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
from scipy import stats

from ..errors import UsageError

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


def kept_references(record: dict[str, Any], requested: list[str]) -> list[str]:
    """The references a resumed record is paired to: those it was paired to before, then the newly `requested`. A
    rerun that adds systems or references recomputes every table (the new systems in them too) and drops none."""
    return list(dict.fromkeys([*record.get("paired", {}), *requested]))


def paired_per_query(values: list[float], reference: list[float], resamples: int, seed: int) -> dict[str, Any]:
    """The mean of `values` minus that of `reference` (per query, the same queries) with its 95% bootstrap
    interval over the queries (`paired_difference` with one query per block)."""
    return paired_difference(values, reference, [1] * len(values), resamples, seed)


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


class LabelledPredictions(Protocol):
    """A run's predictions on the dev examples, with the examples' labels (`finetune.predictions.SplitPredictions`)."""

    labels: np.ndarray


# The score of a model's predictions on the dev examples at the given indices (repeats allowed).
Score = Callable[[LabelledPredictions, np.ndarray], float]


@dataclass(frozen=True)
class PairedDifference:
    """Variant minus baseline: per seed on the whole dev set, their mean, and the bootstrap interval of the mean."""

    seeds: tuple[int, ...]
    differences: tuple[float, ...]
    mean: float
    low: float
    high: float

    @property
    def excludes_zero(self) -> bool:
        return self.low > 0 or self.high < 0


def paired_bootstrap(
    variant: dict[int, LabelledPredictions],
    baseline: dict[int, LabelledPredictions],
    score: Score,
    replicates: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> PairedDifference:
    """The mean over seeds of score(variant) - score(baseline), and its percentile bootstrap interval.

    `variant` and `baseline` map training seeds to dev predictions; only the seeds both have are paired. Every
    replicate resamples the dev examples (the same indices for both sides and all seeds) and the paired seeds,
    with replacement; `seed` fixes the draws.
    """
    seeds = tuple(sorted(set(variant) & set(baseline)))
    if not seeds:
        raise UsageError("The two variants have no seed in common, so there is nothing to pair.")
    labels = baseline[seeds[0]].labels
    for side in (variant, baseline):
        for run_seed in seeds:
            if not np.array_equal(side[run_seed].labels, labels):
                raise UsageError(
                    f"The predictions of seed {run_seed} are on other dev examples (labels differ); paired "
                    "differences need the same dev set for every run."
                )

    def difference(run_seed: int, indices: np.ndarray) -> float:
        return score(variant[run_seed], indices) - score(baseline[run_seed], indices)

    differences = tuple(difference(run_seed, np.arange(len(labels))) for run_seed in seeds)
    rng = np.random.default_rng(seed)
    means = np.empty(replicates)
    for replicate in range(replicates):
        examples = rng.integers(0, len(labels), size=len(labels))
        picked = rng.integers(0, len(seeds), size=len(seeds))
        per_seed = {index: difference(seeds[index], examples) for index in set(picked.tolist())}
        means[replicate] = np.mean([per_seed[index] for index in picked])
    tail = 100.0 * (1.0 - confidence) / 2.0
    low, high = np.percentile(means, [tail, 100.0 - tail])
    return PairedDifference(seeds, differences, float(np.mean(differences)), float(low), float(high))
