import numpy as np
import pytest

from tisa_hf.finetune.glue.metrics import METRICS, glue_metric, glue_metrics
from tisa_hf.finetune.task_tables import TASKS

PREDICTIONS = np.array([1, 1, 0, 0, 1])
LABELS = np.array([1, 0, 0, 1, 1])  # TP 2, TN 1, FP 1, FN 1


def test_accuracy_counts_matches():
    assert glue_metrics("rte", np.eye(2)[[1, 0, 1, 1]], np.array([1, 0, 0, 1])) == {"accuracy": 0.75}


def test_f1_and_accuracy_by_hand():
    # precision = recall = 2/3, so F1 = 2/3; 3 of 5 right.
    metrics = glue_metrics("mrpc", np.eye(2)[PREDICTIONS], LABELS)
    assert metrics["f1"] == pytest.approx(2 / 3)
    assert metrics["accuracy"] == pytest.approx(3 / 5)


def test_matthews_by_hand():
    # (TP·TN - FP·FN) / sqrt((TP+FP)(TP+FN)(TN+FP)(TN+FN)) = (2 - 1) / sqrt(3·3·2·2) = 1/6
    assert METRICS["matthews_correlation"](PREDICTIONS, LABELS) == pytest.approx(1 / 6)


def test_pearson_and_spearman_by_hand():
    # x = 1,2,3; y = 1,2,4: cov 3, |dx| sqrt(2), |dy| sqrt(42)/3 -> r = 9 / sqrt(84); ranks agree -> rho = 1.
    assert METRICS["pearson"](np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 4.0])) == pytest.approx(9 / np.sqrt(84))
    assert METRICS["spearmanr"](np.array([1.0, 2.0, 3.0]), np.array([1.0, 2.0, 4.0])) == pytest.approx(1.0)
    # One swapped pair of ranks out of 4: rho = 1 - 6·2 / (4·15) = 0.8.
    assert METRICS["spearmanr"](np.array([1.0, 2, 3, 4]), np.array([1.0, 3, 2, 4])) == pytest.approx(0.8)


def test_stsb_uses_the_regression_output():
    logits = np.array([[1.0], [2.0], [3.0]])
    assert glue_metrics("stsb", logits, np.array([1.0, 2.0, 4.0]))["pearson"] == pytest.approx(9 / np.sqrt(84))


def test_every_task_has_its_official_metric():
    logits = np.eye(3)[PREDICTIONS]
    names = {task: sorted(glue_metrics(task, logits, LABELS)) for task in TASKS if task != "stsb"}
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


def test_main_metrics_are_the_papers_and_among_the_task_metrics():
    main = {name: task.main_metric for name, task in TASKS.items()}
    assert main == {
        "cola": "matthews_correlation",
        "sst2": "accuracy",
        "mrpc": "accuracy",
        "stsb": "pearson",
        "qqp": "accuracy",
        "mnli": "accuracy",
        "qnli": "accuracy",
        "rte": "accuracy",
        "wnli": "accuracy",
    }
    assert all(task.main_metric in task.metrics for task in TASKS.values())
    evaluation = {"validation_matched": {"accuracy": 0.8}, "validation_mismatched": {"accuracy": 0.7}}
    assert TASKS["mnli"].main_score(evaluation) == 0.8


def test_one_metric_equals_the_full_set_and_unknown_names_are_refused():
    logits = np.eye(2)[PREDICTIONS]
    assert glue_metric("mrpc", "f1", logits, LABELS) == glue_metrics("mrpc", logits, LABELS)["f1"]
    with pytest.raises(ValueError, match=r"^rte has no metric 'f1'; its metrics are accuracy\.$"):
        glue_metric("rte", "f1", logits, LABELS)
