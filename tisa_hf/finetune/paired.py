"""Paired differences between two model variants scored on the same dev examples, with a bootstrap interval that
resamples both the dev examples and the seeds.

Hand-written because `scipy.stats.bootstrap` resamples one level only (paired observations); here each
replicate draws one set of dev examples, used for both sides of every pair, and a set of seeds among those both
variants have, so the interval covers the spread of dev sets and of training seeds together.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..errors import UsageError
from .predictions import SplitPredictions

# The score of a model's predictions on the dev examples at the given indices (repeats allowed).
Score = Callable[[SplitPredictions, np.ndarray], float]


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
    variant: dict[int, SplitPredictions],
    baseline: dict[int, SplitPredictions],
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
