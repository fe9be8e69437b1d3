"""The official GLUE metrics, computed with scikit-learn and SciPy (no Hub-loaded metric scripts)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

from ...errors import UsageError

Metric = Callable[[np.ndarray, np.ndarray], float]  # (predictions, labels) -> score

METRICS: dict[str, Metric] = {
    "accuracy": lambda predictions, labels: float(accuracy_score(labels, predictions)),
    "f1": lambda predictions, labels: float(f1_score(labels, predictions)),  # of the positive class (1)
    "matthews_correlation": lambda predictions, labels: float(matthews_corrcoef(labels, predictions)),
    "pearson": lambda predictions, labels: float(pearsonr(predictions, labels)[0]),
    "spearmanr": lambda predictions, labels: float(spearmanr(predictions, labels)[0]),
}

# Each task's official metrics (STS-B: correlations of the predicted and gold similarity scores).
TASK_METRICS: dict[str, tuple[str, ...]] = {
    "cola": ("matthews_correlation",),
    "sst2": ("accuracy",),
    "mrpc": ("f1", "accuracy"),
    "stsb": ("pearson", "spearmanr"),
    "qqp": ("f1", "accuracy"),
    "mnli": ("accuracy",),
    "qnli": ("accuracy",),
    "rte": ("accuracy",),
    "wnli": ("accuracy",),
}


def predictions_from_logits(task: str, logits: np.ndarray) -> np.ndarray:
    """Argmax for classification, the score for STS-B."""
    return np.asarray(logits.squeeze(-1) if task == "stsb" else logits.argmax(-1))


def glue_metrics(task: str, logits: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """The task's official metrics from model outputs."""
    predictions, labels = predictions_from_logits(task, logits), np.asarray(labels)
    return {name: METRICS[name](predictions, labels) for name in TASK_METRICS[task]}


def glue_metric(task: str, name: str, logits: np.ndarray, labels: np.ndarray) -> float:
    """One of the task's official metrics (what a bootstrap recomputes thousands of times)."""
    if name not in TASK_METRICS[task]:
        raise UsageError(f"{task} has no metric {name!r}; its metrics are {', '.join(TASK_METRICS[task])}.")
    return METRICS[name](predictions_from_logits(task, logits), np.asarray(labels))
