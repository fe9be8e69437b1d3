"""`tisa-hf report` over document-classification runs: per-fold test scores, their cross-validated mean and spread
over folds, and paired differences over folds, seeds and articles."""

import json
import statistics

import numpy as np
import pytest
from sklearn.metrics import accuracy_score, f1_score

from tisa_hf.commands import cli
from tisa_hf.experiments.document_report import fold_table, paired_differences
from tisa_hf.experiments.report import collect

main = cli.entry("report")  # `tisa-hf report`

FOLDS = {0: [f"a{index}" for index in range(0, 10)], 1: [f"a{index}" for index in range(10, 22)]}
SEEDS = (1, 2)


def labels_of(fold):
    return np.array([index % 3 == 0 for index in range(len(FOLDS[fold]))], dtype=int)


def logits_for(predicted):
    return np.stack([1.0 - predicted, predicted.astype(float)], axis=1)


def scores(predicted, labels):
    """The reference: scikit-learn on the predicted classes, in points."""
    return {"accuracy": 100 * accuracy_score(labels, predicted), "f1": 100 * f1_score(labels, predicted)}


def write_document_run(root, variant, fold, seed, predicted, config):
    run_dir = root / variant / f"fold-{fold}" / f"seed-{seed}"
    run_dir.mkdir(parents=True)
    labels = labels_of(fold)
    test = {name: value / 100 for name, value in scores(predicted, labels).items()}
    record = {
        "task": "hyperpartisan",
        "model": "minilm",
        "tisa": config.pop("tisa", None),
        "seed": seed,
        "metrics": {"validation": {"accuracy": 0.5, "f1": 0.5}, "test": test},
        "config": {"fold": fold, "seed": seed, "output_dir": str(run_dir), "learning_rate": 3e-5, **config},
        "documents": {"labels": ["false", "true"], "positive": "true", "data": "fake", "truncation": {}},
    }
    (run_dir / "metrics.json").write_text(json.dumps(record))
    split = {"logits": logits_for(predicted).tolist(), "labels": labels.tolist(), "ids": FOLDS[fold]}
    (run_dir / "predictions.json").write_text(
        json.dumps({"task": "hyperpartisan", "step": 1, "splits": {"test": split}})
    )


@pytest.fixture
def fold_runs(tmp_path):
    """Two variants x two folds x two seeds; each run's predictions flip a different set of articles."""
    rng = np.random.default_rng(0)
    predictions = {}
    variants = {
        "head-512": ({"max_seq_length": 512, "truncation": "head"}, 0.2),
        "s5-2048": ({"max_seq_length": 2048, "truncation": "head", "tisa": {"num_kernels": 5, "mode": "replace"}}, 0.1),
    }
    for variant, (config, error) in variants.items():
        for fold in FOLDS:
            for seed in SEEDS:
                labels = labels_of(fold)
                predicted = np.where(rng.random(len(labels)) < error, 1 - labels, labels)
                predictions[(variant, fold, seed)] = predicted
                write_document_run(tmp_path, variant, fold, seed, predicted, dict(config))
    return tmp_path, predictions


def test_cross_validated_aggregate_is_the_mean_and_spread_over_folds(fold_runs):
    root, predictions = fold_runs
    table = fold_table(collect(root))
    assert set(table) == {("minilm", "baseline, head 512"), ("minilm", "TISA S=5 (replace), head 2048")}
    for variant, label in (("head-512", "baseline, head 512"), ("s5-2048", "TISA S=5 (replace), head 2048")):
        entry = table[("minilm", label)]
        for metric in ("accuracy", "f1"):
            per_fold = [
                statistics.mean(scores(predictions[(variant, fold, seed)], labels_of(fold))[metric] for seed in SEEDS)
                for fold in FOLDS
            ]
            assert [entry["folds"][fold][metric] for fold in FOLDS] == pytest.approx(per_fold)
            assert entry[metric]["mean"] == pytest.approx(statistics.mean(per_fold))
            assert entry[metric]["sd"] == pytest.approx(statistics.stdev(per_fold))
        assert entry["seeds"] == list(SEEDS)


def test_paired_differences_are_per_seed_means_over_folds(fold_runs, tmp_path, capsys):
    root, predictions = fold_runs
    entries = paired_differences(collect(root), "baseline, head 512", replicates=200)
    assert [(entry["variant"], entry["column"]) for entry in entries] == [
        ("TISA S=5 (replace), head 2048", "Accuracy"),
        ("TISA S=5 (replace), head 2048", "F1"),
    ]
    for entry in entries:
        expected = [
            statistics.mean(
                scores(predictions[("s5-2048", fold, seed)], labels_of(fold))[entry["metric"]]
                - scores(predictions[("head-512", fold, seed)], labels_of(fold))[entry["metric"]]
                for fold in FOLDS
            )
            for seed in SEEDS
        ]
        assert entry["differences"] == pytest.approx(expected) and entry["folds"] == [0, 1]
        assert entry["mean"] == pytest.approx(statistics.mean(expected))
        assert entry["low"] <= entry["mean"] <= entry["high"]

    out = tmp_path / "report.json"
    assert main([str(root), "--paired", "baseline, head 512", "--bootstrap", "200", "--json", str(out)]) == 0
    text = capsys.readouterr().out
    assert "### minilm: test scores, cross-validated" in text and "| fold 0 | fold 1 |" in text
    assert "### minilm: paired differences to baseline, head 512" in text
    assert json.loads(out.read_text())["paired"]["differences"] == json.loads(json.dumps(entries))


def test_paired_needs_a_known_row(fold_runs, capsys):
    root, _ = fold_runs
    assert main([str(root), "--paired", "baseline"]) == 2
    assert capsys.readouterr().err == (
        "tisa-hf report: --paired 'baseline': no such variant for minilm; its variants are TISA S=5 (replace), head "
        "2048, baseline, head 512.\n"
    )


def test_a_task_of_three_classes_shows_no_positive_class_f1(tmp_path, capsys):
    run_dir = tmp_path / "three" / "fold-0" / "seed-1"
    run_dir.mkdir(parents=True)
    record = {
        "task": "topics",
        "model": "minilm",
        "tisa": None,
        "seed": 1,
        "metrics": {"validation": {"accuracy": 0.5}, "test": {"accuracy": 0.625, "macro_f1": 0.6}},
        "config": {"fold": 0, "seed": 1, "output_dir": str(run_dir), "learning_rate": 3e-5},
        "documents": {"labels": ["a", "b", "c"], "positive": None, "data": "fake", "truncation": {}},
    }
    (run_dir / "metrics.json").write_text(json.dumps(record))
    assert main([str(tmp_path)]) == 0
    text = capsys.readouterr().out
    assert "| 62.5 ± 0.0 | n/a | 1 x 1 |" in text and "| 62.5 / n/a |" in text
    assert "n/a: a task of more than two classes has no positive class" in text


def test_a_schedule_that_follows_the_folds_training_size_is_one_variant(tmp_path):
    """Folds of 463 and 465 training articles resolve 5 epochs to 145 and 150 steps: the same variant. Two step
    counts on one fold are two variants."""
    predicted = {fold: labels_of(fold) for fold in FOLDS}
    config = {"max_seq_length": 512, "truncation": "head"}
    for fold, steps in ((0, 145), (1, 150)):
        write_document_run(tmp_path / "cv", "head-512", fold, 1, predicted[fold], {**config, "max_steps": steps})
    assert {run["variant"] for run in collect(tmp_path / "cv")} == {"baseline, head 512"}

    for steps in (145, 300):
        write_document_run(tmp_path / f"steps-{steps}", "head-512", 0, 1, predicted[0], {**config, "max_steps": steps})
    variants = {run["variant"] for run in collect([tmp_path / "steps-145", tmp_path / "steps-300"])}
    assert variants == {"baseline, head 512 (max_steps=145)", "baseline, head 512 (max_steps=300)"}


def test_a_grid_with_more_seeds_on_some_folds_says_so(fold_runs, capsys):
    root, _ = fold_runs
    assert main([str(root)]) == 0
    assert "| 2 x 2 |" in capsys.readouterr().out
    for run_file in (root / "s5-2048" / "fold-1" / "seed-2").iterdir():
        run_file.unlink()
    (root / "s5-2048" / "fold-1" / "seed-2").rmdir()
    assert main([str(root)]) == 0
    text = capsys.readouterr().out
    assert "TISA S=5 (replace), head 2048 |" in text and "| 2 x 1-2 (uneven) |" in text
    assert main([str(root), "--seeds", "1"]) == 0
    assert "| 2 x 1 |" in capsys.readouterr().out
