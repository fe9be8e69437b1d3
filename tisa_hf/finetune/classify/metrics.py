"""Scores of document classification, with scikit-learn: accuracy, F1 of the positive class (binary tasks: the
hyperpartisan class of SemEval-2019 Task 4, the score Longformer and BigBird report) and macro-F1 (the mean over
classes, which does not reward predicting the majority class)."""

from __future__ import annotations

import numpy as np
from sklearn.metrics import accuracy_score, f1_score

from .labels import LabelVocabulary


def main_metric(labels: LabelVocabulary) -> str:
    """The score that ranks models (and selects the best checkpoint): positive-class F1 for binary tasks, macro-F1
    otherwise."""
    return "f1" if labels.num_labels == 2 else "macro_f1"


def document_metrics(logits: np.ndarray, label_ids: np.ndarray, labels: LabelVocabulary) -> dict[str, float]:
    """accuracy, macro_f1 and, when the task has a positive class, f1 (of that class) from (n, classes) logits."""
    predictions, label_ids = np.asarray(logits).argmax(-1), np.asarray(label_ids)
    scores = {
        "accuracy": float(accuracy_score(label_ids, predictions)),
        # over the classes present in the labels or predictions; a class never predicted has F1 0 (zero_division=0
        # says so instead of warning at every evaluation)
        "macro_f1": float(f1_score(label_ids, predictions, average="macro", zero_division=0)),
    }
    if labels.positive_id is not None:
        scores["f1"] = float(
            f1_score(label_ids, predictions, labels=[labels.positive_id], average="macro", zero_division=0)
        )
    return scores
