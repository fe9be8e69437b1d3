"""The official GLUE metrics, computed with scikit-learn and SciPy (no Hub-loaded metric scripts)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from ...errors import UsageError
from ..task_tables import get_task

Metric = Callable[[np.ndarray, np.ndarray], float]  # (predictions, labels) -> score

METRICS: dict[str, Metric] = {
    "accuracy": lambda predictions, labels: float(accuracy_score(labels, predictions)),
    "f1": lambda predictions, labels: float(f1_score(labels, predictions)),  # of the positive class (1)
    "matthews_correlation": lambda predictions, labels: float(matthews_corrcoef(labels, predictions)),
    "pearson": lambda predictions, labels: float(pearsonr(predictions, labels)[0]),
    "spearmanr": lambda predictions, labels: float(spearmanr(predictions, labels)[0]),
}


def predictions_from_logits(task: str, logits: np.ndarray) -> np.ndarray:
    """Argmax for classification, the score for a regression task (STS-B)."""
    return np.asarray(logits.squeeze(-1) if get_task(task).is_regression else logits.argmax(-1))


def glue_metrics(task: str, logits: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """The task's official metrics from model outputs."""
    predictions, labels = predictions_from_logits(task, logits), np.asarray(labels)
    return {name: METRICS[name](predictions, labels) for name in get_task(task).metrics}


def glue_metric(task: str, name: str, logits: np.ndarray, labels: np.ndarray) -> float:
    """One of the task's official metrics (what a bootstrap recomputes thousands of times)."""
    metrics = get_task(task).metrics
    if name not in metrics:
        raise UsageError(f"{task} has no metric {name!r}; its metrics are {', '.join(metrics)}.")
    return METRICS[name](predictions_from_logits(task, logits), np.asarray(labels))
