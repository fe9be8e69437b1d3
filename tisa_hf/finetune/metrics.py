"""The official GLUE metrics, computed with scikit-learn and SciPy (no Hub-loaded metric scripts)."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
from scipy.stats import pearsonr, spearmanr
from sklearn.metrics import accuracy_score, f1_score, matthews_corrcoef

Metric = Callable[[np.ndarray, np.ndarray], dict[str, float]]


def accuracy(predictions: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    return {"accuracy": float(accuracy_score(labels, predictions))}


def f1_and_accuracy(predictions: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """MRPC and QQP: F1 of the positive class (1) and accuracy."""
    return {"f1": float(f1_score(labels, predictions)), **accuracy(predictions, labels)}


def matthews(predictions: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    return {"matthews_correlation": float(matthews_corrcoef(labels, predictions))}


def pearson_and_spearman(predictions: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """STS-B: correlations of the predicted and gold similarity scores."""
    return {
        "pearson": float(pearsonr(predictions, labels)[0]),
        "spearmanr": float(spearmanr(predictions, labels)[0]),
    }


TASK_METRICS: dict[str, Metric] = {
    "cola": matthews,
    "sst2": accuracy,
    "mrpc": f1_and_accuracy,
    "stsb": pearson_and_spearman,
    "qqp": f1_and_accuracy,
    "mnli": accuracy,
    "qnli": accuracy,
    "rte": accuracy,
    "wnli": accuracy,
}


def glue_metrics(task: str, logits: np.ndarray, labels: np.ndarray) -> dict[str, float]:
    """The task's official metrics from model outputs: argmax for classification, the score for STS-B."""
    predictions = logits.squeeze(-1) if task == "stsb" else logits.argmax(-1)
    return TASK_METRICS[task](np.asarray(predictions), np.asarray(labels))
