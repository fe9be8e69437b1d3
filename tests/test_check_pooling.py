"""`scripts/check_pooling.py` on a tiny random BERT and generated GLUE files (nothing is downloaded)."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForSequenceClassification, RobertaForSequenceClassification

from tests.fixtures import load_script, tiny_config, write_glue_tsv, write_tiny_model

ROOT = Path(__file__).resolve().parents[1]
SCRIPTS = ROOT / "scripts"


@pytest.fixture(scope="module")
def pooling(tmp_path_factory):
    return load_script("check_pooling")  # it imports its sibling check_against_trainer


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("pooling")
    write_tiny_model(root / "bert")
    for task, folder in (("rte", "RTE"), ("stsb", "STS-B")):
        write_glue_tsv(root / "glue" / folder, task)
        (root / "configs").mkdir(exist_ok=True)
        (root / "configs" / f"{task}.yaml").write_text(f"task: {task}\nlearning_rate: 1e-3\nwarmup_ratio: 0.25\n")
    return root


@pytest.mark.parametrize("problem_type", ["single_label_classification", "regression"])
def test_mean_pooling_feeds_the_models_own_classifier_and_loss(pooling, workspace, problem_type):
    num_labels = 1 if problem_type == "regression" else 2
    model = AutoModelForSequenceClassification.from_pretrained(
        workspace / "bert", num_labels=num_labels, problem_type=problem_type
    ).eval()
    wrapped = pooling.MeanPooledClassifier(model).eval()
    input_ids = torch.tensor([[2, 7, 8, 9, 3, 0, 0], [2, 10, 11, 12, 13, 14, 3]])
    attention_mask = (input_ids != 0).long()
    labels = torch.tensor([0.5, 2.0]) if num_labels == 1 else torch.tensor([0, 1])
    output = wrapped(input_ids=input_ids, attention_mask=attention_mask, labels=labels)

    hidden = model.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    means = torch.stack([hidden[0, :5].mean(0), hidden[1].mean(0)])
    expected = model.classifier(means)
    torch.testing.assert_close(output.logits, expected)
    if num_labels == 1:
        torch.testing.assert_close(output.loss, ((expected.squeeze(-1) - labels) ** 2).mean())
    else:
        torch.testing.assert_close(output.loss, torch.nn.functional.cross_entropy(expected, labels))
    unpadded = wrapped(input_ids=input_ids[:1, :5], attention_mask=attention_mask[:1, :5]).logits
    torch.testing.assert_close(unpadded, output.logits[:1])  # padding does not enter the mean


def test_heads_without_a_linear_classifier_are_refused(pooling):
    config = tiny_config("roberta", vocab_size=50, hidden_size=16, num_hidden_layers=1)
    with pytest.raises(ValueError) as error:
        pooling.MeanPooledClassifier(RobertaForSequenceClassification(config))
    assert str(error.value) == (
        "RobertaForSequenceClassification has no linear `classifier` after a `dropout` over a pooled vector (as BERT "
        "and ALBERT have); mean pooling is built for those."
    )


def test_both_heads_train_and_finished_runs_are_reused(workspace, tmp_path):
    output = tmp_path / "out"
    argv = [
        str(SCRIPTS / "check_pooling.py"), "--task", "rte", "stsb", "--seeds", "1",
        "--model", str(workspace / "bert"), "--data-dir", str(workspace / "glue"),
        "--config-dir", str(workspace / "configs"), "--output-dir", str(output),
        "--", "--train-batch-size", "16", "--max-seq-length", "32", "--num-train-epochs", "1",
    ]  # fmt: skip
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    completed = subprocess.run([sys.executable, *argv], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert completed.returncode == 0, completed.stderr[-3000:]
    runs = json.loads((output / "comparison.json").read_text())["runs"]
    assert [(run["task"], run["seed"]) for run in runs] == [("rte", 1), ("stsb", 1)]
    for run in runs:
        assert run["pooler"]["steps"] == run["mean"]["steps"] == run["settings"]["max_steps"] == 4  # 64 / 16
        assert run["settings"]["warmup_steps"] == 1
    assert runs[1]["pooler"]["metrics"] != runs[1]["mean"]["metrics"]  # STS-B's Pearson tells two models apart
    rte = [100 * runs[0][head]["metrics"]["validation"]["accuracy"] for head in ("pooler", "mean")]
    assert f"| rte | accuracy | 1 | {rte[0]:.1f} [{rte[0]:.1f}, {rte[0]:.1f}] | {rte[1]:.1f} [" in completed.stdout
    assert f"| {rte[1] - rte[0]:+.1f} |" in completed.stdout

    record = output / "mean" / "stsb" / "seed-1" / "metrics.json"
    before = record.stat().st_mtime_ns
    again = subprocess.run([sys.executable, *argv], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert again.returncode == 0, again.stderr[-3000:]
    assert record.stat().st_mtime_ns == before  # reused, not rerun
    changed = [*argv, "--learning-rate", "1e-4"]
    refused = subprocess.run([sys.executable, *changed], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert refused.returncode == 2
    assert refused.stderr.startswith(f"check_pooling: {output / 'pooler' / 'rte' / 'seed-1'} holds a finished run")
