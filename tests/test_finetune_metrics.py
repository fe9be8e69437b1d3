import numpy as np
import pytest

from tisa_hf.finetune.metrics import TASK_METRICS, glue_metrics

PREDICTIONS = np.array([1, 1, 0, 0, 1])
LABELS = np.array([1, 0, 0, 1, 1])  # TP 2, TN 1, FP 1, FN 1


def test_accuracy_counts_matches():
    assert glue_metrics("rte", np.eye(2)[[1, 0, 1, 1]], np.array([1, 0, 0, 1])) == {"accuracy": 0.75}


def test_f1_and_accuracy_by_hand():
    # precision = recall = 2/3, so F1 = 2/3; 3 of 5 right.
    metrics = TASK_METRICS["mrpc"](PREDICTIONS, LABELS)
    assert metrics["f1"] == pytest.approx(2 / 3)
    assert metrics["accuracy"] == pytest.approx(3 / 5)


def test_matthews_by_hand():
    # (TP·TN - FP·FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)) = (2 - 1) / sqrt(3·3·2·2) = 1/6
    assert TASK_METRICS["cola"](PREDICTIONS, LABELS)["matthews_correlation"] == pytest.approx(1 / 6)


def test_pearson_and_spearman_by_hand():
    # x = 1,2,3; y = 1,2,4: cov 3, |dx| sqrt(2), |dy| sqrt(42)/3 -> r = 9 / sqrt(84); ranks agree -> rho = 1.
    metrics = TASK_METRICS["stsb"](np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 4.0]))
    assert metrics["pearson"] == pytest.approx(9 / np.sqrt(84))
    assert metrics["spearmanr"] == pytest.approx(1.0)
    # One swapped pair of ranks out of 4: rho = 1 - 6·2 / (4·15) = 0.8.
    assert TASK_METRICS["stsb"](np.array([1.0, 2, 3, 4]), np.array([1.0, 3, 2, 4]))["spearmanr"] == pytest.approx(0.8)


def test_stsb_uses_the_regression_output():
    logits = np.array([[1.0], [2.0], [3.0]])
    assert glue_metrics("stsb", logits, np.array([1.0, 2.0, 4.0]))["pearson"] == pytest.approx(9 / np.sqrt(84))


def test_every_task_has_its_official_metric():
    names = {task: sorted(metric(PREDICTIONS, LABELS)) for task, metric in TASK_METRICS.items() if task != "stsb"}
    assert names == {
        "cola": ["matthews_correlation"],
        "sst2": ["accuracy"],
        "mrpc": ["accuracy", "f1"],
        "qqp": ["accuracy", "f1"],
        "mnli": ["accuracy"],
        "qnli": ["accuracy"],
        "rte": ["accuracy"],
        "wnli": ["accuracy"],
    }
