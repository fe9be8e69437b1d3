"""The report of document-classification runs (`tisa-hf classify`, whose metrics.json carries a `documents`
record): each variant's test scores per fold, and cross-validated over folds, in the columns accuracy and
positive-class F1; with `--paired VARIANT`, every other variant's paired difference to it.

Cross-validated cell: the mean over folds of each fold's test score (itself the mean over that fold's seeds),
± the standard deviation over folds. Paired difference: per seed, the mean over the folds both variants have of
the difference on the same test articles; its 95% interval is `paired_bootstrap`'s, with every replicate
resampling the test articles of all folds together (the same ones for both sides) and the seeds, the score of a
replicate being the mean over folds of each fold's score on its resampled articles.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from typing import Any

import numpy as np

from ..common.paired import paired_bootstrap
from ..common.tables import seed_paired_cell
from ..errors import UsageError
from ..finetune.classify.labels import LabelVocabulary
from ..finetune.predictions import SplitPredictions, read_predictions
from ..finetune.run_folder import DOCUMENTS_KEY
from .variants import compared_model, variant_order

TEST = "test"
COLUMNS = (("Accuracy", "accuracy"), ("F1", "f1"))  # (column, metric): F1 of the positive class
NO_F1 = "n/a"  # the F1 cell of a task without a positive class


def _vocabulary(result: dict[str, Any]) -> LabelVocabulary:
    record = result[DOCUMENTS_KEY]
    return LabelVocabulary(tuple(record["labels"]), record["positive"])


def _fold(result: dict[str, Any]) -> int:
    fold = (result.get("config") or {}).get("fold")
    if fold is None:
        return -1  # the fixed split: one "fold"
    return int(fold)


def _by_variant(results: list[dict[str, Any]]) -> dict[tuple[str, str], dict[int, dict[int, dict[str, Any]]]]:
    """{(model, variant): {fold: {seed: run}}}, refusing two runs of one fold and seed."""
    runs: dict[tuple[str, str], dict[int, dict[int, dict[str, Any]]]] = defaultdict(lambda: defaultdict(dict))
    for result in results:
        cell = runs[(compared_model(result), result["variant"])][_fold(result)]
        other = cell.get(result["seed"])
        if other is not None:
            raise UsageError(
                f"{other['run_dir']} and {result['run_dir']} are both fold {_fold(result)}, seed {result['seed']} of "
                f"{result['variant']}; keep one of them in the folder."
            )
        cell[result["seed"]] = result
    return runs


def fold_table(results: list[dict[str, Any]]) -> dict[tuple[str, str], dict[str, Any]]:
    """{(model, variant): {"folds": {fold: {metric: mean over seeds}}, metric: {"mean", "sd"} over folds,
    "seeds": sorted seeds, "seeds_per_fold": {fold: how many}}} of the test scores, in points."""
    table = {}
    for key, folds in _by_variant(results).items():
        per_fold = {
            fold: {
                # a task of more than two classes has no positive class, so no F1: nan
                metric: 100.0 * statistics.mean(run["metrics"][TEST].get(metric, np.nan) for run in seeds.values())
                for _, metric in COLUMNS
            }
            for fold, seeds in sorted(folds.items())
            if all(TEST in run["metrics"] for run in seeds.values())
        }
        if not per_fold:
            continue
        entry: dict[str, Any] = {
            "folds": per_fold,
            "seeds": sorted({s for seeds in folds.values() for s in seeds}),
            "seeds_per_fold": {fold: len(folds[fold]) for fold in per_fold},
        }
        for _, metric in COLUMNS:
            values = [scores[metric] for scores in per_fold.values()]
            spread = statistics.stdev(values) if len(values) > 1 else 0.0
            entry[metric] = {"mean": statistics.mean(values), "sd": spread}
        table[key] = entry
    return table


def _replicates(entry: dict[str, Any]) -> str:
    """`folds x seeds`; where folds have different numbers of seeds (a grid still running), their range, marked:
    each fold's mean is then over its own seeds, and `--seeds` gives the balanced part."""
    counts = entry["seeds_per_fold"].values()
    fewest, most = min(counts), max(counts)
    seeds = str(most) if fewest == most else f"{fewest}-{most} (uneven)"
    return f"{len(entry['folds'])} x {seeds}"


def _points(value: float) -> str:
    return NO_F1 if np.isnan(value) else f"{value:.1f}"


def render(table: dict[tuple[str, str], dict[str, Any]]) -> str:
    """Per model: the cross-validated table, then the per-fold one."""
    blocks = []
    for model in sorted({model for model, _ in table}):
        variants = sorted((variant for m, variant in table if m == model), key=variant_order)
        folds = sorted({fold for (m, _), entry in table.items() if m == model for fold in entry["folds"]})
        names = ["fixed split" if fold < 0 else f"fold {fold}" for fold in folds]
        lines = [f"### {model}: test scores, cross-validated", "", "| | Accuracy | F1 | folds x seeds |"]
        lines.append("|---" * 4 + "|")
        for variant in variants:
            entry = table[(model, variant)]
            cells = [
                NO_F1 if np.isnan(entry[metric]["mean"]) else f"{entry[metric]['mean']:.1f} ± {entry[metric]['sd']:.1f}"
                for _, metric in COLUMNS
            ]
            lines.append(f"| {variant} | {' | '.join(cells)} | {_replicates(entry)} |")
        lines += ["", f"### {model}: test accuracy / F1 per fold", "", "| | " + " | ".join(names) + " |"]
        lines.append("|---" * (len(names) + 1) + "|")
        for variant in variants:
            per_fold = table[(model, variant)]["folds"]
            cells = [
                f"{per_fold[fold]['accuracy']:.1f} / {_points(per_fold[fold]['f1'])}" if fold in per_fold else ""
                for fold in folds
            ]
            lines.append(f"| {variant} | " + " | ".join(cells) + " |")
        blocks.append("\n".join(lines))
    note = (
        "Cells: test score in points (F1 of the positive class), the mean over folds of each fold's mean over "
        f"seeds ± the standard deviation over folds; per fold, the mean over seeds. {NO_F1}: a task of more than two "
        "classes has no positive class (its main metric, macro-F1, is in metrics.json)."
    )
    return "\n\n".join(blocks) + "\n\n" + note + "\n"


def _pooled(runs: dict[int, dict[str, Any]], folds: list[int]) -> tuple[SplitPredictions, np.ndarray]:
    """The test predictions of one seed's runs over `folds`, joined in fold order, and each article's fold."""
    parts = [read_predictions(runs[fold]["run_dir"]).splits[TEST] for fold in folds]
    ids = [article for part in parts for article in (part.ids or ())]
    pooled = SplitPredictions(
        np.concatenate([part.logits for part in parts]),
        np.concatenate([part.labels for part in parts]),
        tuple(ids) if all(part.ids is not None for part in parts) else None,
    )
    return pooled, np.concatenate([np.full(len(part.labels), fold) for part, fold in zip(parts, folds, strict=True)])


def _score_of(metric: str, predicted: np.ndarray, labels: np.ndarray, positive: int) -> float:
    """Accuracy, or F1 of the `positive` class (0 where it is neither predicted nor present), as
    `document_metrics` computes them: written out in numpy because a bootstrap calls it thousands of times, and
    scikit-learn's checks take a millisecond a call."""
    if metric == "accuracy":
        return float(np.mean(predicted == labels))
    true_positives = np.sum((predicted == positive) & (labels == positive))
    counted = np.sum(predicted == positive) + np.sum(labels == positive)
    return float(2 * true_positives / counted) if counted else 0.0


def _fold_mean_score(metric: str, vocabulary: LabelVocabulary, fold_of: np.ndarray):
    """The paired score: the mean over folds of the metric on each fold's (resampled) articles, in points."""

    def score(predictions: SplitPredictions, indices: np.ndarray) -> float:
        predicted, labels, folds = predictions.logits[indices].argmax(-1), predictions.labels[indices], fold_of[indices]
        values = [
            _score_of(metric, predicted[folds == fold], labels[folds == fold], vocabulary.positive_id)
            for fold in np.unique(folds)
        ]
        return 100.0 * float(np.mean(values))

    return score


def paired_differences(
    results: list[dict[str, Any]], baseline: str, replicates: int = 1000, seed: int = 0
) -> list[dict[str, Any]]:
    """Every variant's paired difference to `baseline` (same model) over the folds and seeds both have."""
    runs = _by_variant(results)
    for model in sorted({model for model, _ in runs}):
        if (model, baseline) not in runs:
            variants = sorted(variant for m, variant in runs if m == model)
            raise UsageError(
                f"--paired {baseline!r}: no such variant for {model}; its variants are {', '.join(variants)}."
            )
    entries = []
    for (model, variant), folds in sorted(runs.items()):
        base = runs[(model, baseline)]
        if variant == baseline:
            continue
        common_folds = sorted(set(folds) & set(base))
        seeds = sorted(
            set.intersection(*({*folds[fold]} & {*base[fold]} for fold in common_folds)) if common_folds else set()
        )
        if not seeds:
            continue
        sides, fold_of = [], None
        for side in (folds, base):
            pooled = {}
            for run_seed in seeds:
                pooled[run_seed], fold_of = _pooled({fold: side[fold][run_seed] for fold in common_folds}, common_folds)
            sides.append(pooled)
        reference = sides[1][seeds[0]].ids
        for side in sides:
            for run_seed, pooled in side.items():
                if pooled.ids != reference:
                    raise UsageError(
                        f"Seed {run_seed} of {variant} or {baseline} was tested on other articles than the rest; "
                        "paired differences need the same folds (--fold, --dev-fraction, --dev-split-seed) for every "
                        "run."
                    )
        vocabulary = _vocabulary(folds[common_folds[0]][seeds[0]])
        for column, metric in COLUMNS if vocabulary.positive_id is not None else COLUMNS[:1]:
            difference = paired_bootstrap(*sides, _fold_mean_score(metric, vocabulary, fold_of), replicates, seed)
            entries.append(
                {
                    "model": model,
                    "column": column,
                    "metric": metric,
                    "variant": variant,
                    "baseline": baseline,
                    "folds": common_folds,
                    "seeds": list(difference.seeds),
                    "differences": list(difference.differences),
                    "mean": difference.mean,
                    "low": difference.low,
                    "high": difference.high,
                    "excludes_zero": difference.excludes_zero,
                }
            )
    return entries


def render_paired(entries: list[dict[str, Any]], replicates: int) -> str:
    blocks = []
    for model in sorted({entry["model"] for entry in entries}):
        mine = [entry for entry in entries if entry["model"] == model]
        cells = {(entry["variant"], entry["column"]): entry for entry in mine}
        lines = [f"### {model}: paired differences to {mine[0]['baseline']}", "", "| | Accuracy | F1 | folds |"]
        lines.append("|---" * 4 + "|")
        for variant in sorted({entry["variant"] for entry in mine}, key=variant_order):
            row = [seed_paired_cell(cells[(variant, c)]) if (variant, c) in cells else "" for c, _ in COLUMNS]
            lines.append(f"| {variant} | {' | '.join(row)} | {len(cells[(variant, 'Accuracy')]['folds'])} |")
        blocks.append("\n".join(lines))
    reference = entries[0]["baseline"] if entries else "the reference"
    note = (
        f"Cells: variant minus {reference} in points on the same test articles, the mean over seeds of the mean over "
        f"folds, [95% bootstrap interval over articles and seeds, {replicates} resamples] (paired seeds); * the "
        "interval excludes 0."
    )
    return "\n\n".join(blocks) + "\n\n" + note + "\n"
