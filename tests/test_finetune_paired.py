"""Paired bootstrap differences on synthetic predictions whose true difference is known."""

import numpy as np
import pytest

from tisa_hf.common.paired import paired_bootstrap
from tisa_hf.finetune.glue.metrics import glue_metric
from tisa_hf.finetune.predictions import SplitPredictions

EXAMPLES = 1000


def accuracy_points(predictions, indices):
    return 100.0 * glue_metric("rte", "accuracy", predictions.logits[indices], predictions.labels[indices])


def classifier(labels, accuracy, rng):
    """Logits that are right on a random `accuracy` share of the examples."""
    right = rng.random(len(labels)) < accuracy
    return SplitPredictions(np.eye(2, dtype=np.float32)[np.where(right, labels, 1 - labels)], labels)


@pytest.fixture(scope="module")
def runs():
    """Three seeds of two models on one dev set: 80% and 70% right, a true difference of 10 points."""
    rng = np.random.default_rng(7)
    labels = rng.integers(0, 2, EXAMPLES)
    better = {seed: classifier(labels, 0.80, rng) for seed in (1, 2, 3)}
    worse = {seed: classifier(labels, 0.70, rng) for seed in (1, 2, 3, 4)}  # seed 4 has no partner
    return better, worse


def test_interval_contains_the_true_difference_and_excludes_zero(runs):
    better, worse = runs
    result = paired_bootstrap(better, worse, accuracy_points, replicates=300, seed=0)
    assert result.seeds == (1, 2, 3)
    everything = np.arange(EXAMPLES)
    direct = [accuracy_points(better[s], everything) - accuracy_points(worse[s], everything) for s in (1, 2, 3)]
    assert result.differences == pytest.approx(direct) and result.mean == pytest.approx(np.mean(direct))
    assert result.low < 10.0 < result.high
    assert result.low > 0 and result.excludes_zero
    assert result.low < result.mean < result.high


def test_interval_width_matches_the_normal_approximation_on_one_seed(runs):
    """One seed: only dev examples are resampled, and the interval of a difference of accuracies is close to
    mean +- 1.96 x the standard error of the per-example differences."""
    better, worse = runs
    result = paired_bootstrap({1: better[1]}, {1: worse[1]}, accuracy_points, replicates=1000, seed=0)
    per_example = 100.0 * (
        (better[1].logits.argmax(-1) == better[1].labels).astype(float)
        - (worse[1].logits.argmax(-1) == worse[1].labels)
    )
    half_width = 1.96 * per_example.std(ddof=1) / np.sqrt(EXAMPLES)
    assert result.mean == pytest.approx(per_example.mean())
    assert result.high - result.low == pytest.approx(2 * half_width, rel=0.15)
    assert (result.low + result.high) / 2 == pytest.approx(result.mean, abs=0.2 * half_width)


def test_the_bootstrap_seed_fixes_the_numbers(runs):
    better, worse = runs
    first = paired_bootstrap(better, worse, accuracy_points, replicates=100, seed=3)
    again = paired_bootstrap(better, worse, accuracy_points, replicates=100, seed=3)
    other = paired_bootstrap(better, worse, accuracy_points, replicates=100, seed=4)
    assert first == again
    assert (other.low, other.high) != (first.low, first.high) and other.mean == first.mean


def test_identical_pair_gives_a_zero_width_interval_at_zero(runs):
    better, _ = runs
    result = paired_bootstrap(better, dict(better), accuracy_points, replicates=50)
    assert (result.mean, result.low, result.high) == (0.0, 0.0, 0.0)
    assert result.differences == (0.0, 0.0, 0.0) and not result.excludes_zero


def test_other_dev_examples_or_no_common_seed_are_refused(runs):
    better, worse = runs
    shuffled = SplitPredictions(worse[2].logits, worse[2].labels[::-1].copy())
    with pytest.raises(ValueError, match=r"^The predictions of seed 2 are on other dev examples \(labels differ\)"):
        paired_bootstrap(better, {1: worse[1], 2: shuffled}, accuracy_points, replicates=10)
    with pytest.raises(ValueError, match="^The two variants have no seed in common"):
        paired_bootstrap({1: better[1]}, {4: worse[4]}, accuracy_points, replicates=10)
