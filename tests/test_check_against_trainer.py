"""`scripts/check_against_trainer.py` on a tiny random BERT and generated GLUE files (nothing is downloaded)."""

import argparse
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.fixtures import load_script, write_glue_tsv, write_tiny_model

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "check_against_trainer.py"
TINY_SETTINGS = [
    "--train-batch-size", "8", "--eval-batch-size", "8", "--max-seq-length", "32", "--logging-steps", "2",
]  # fmt: skip


def check(tmp_path, *argv):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, str(SCRIPT), *argv], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("check")
    write_tiny_model(root / "bert")
    for task, folder in (("rte", "RTE"), ("mrpc", "MRPC"), ("stsb", "STS-B")):
        write_glue_tsv(root / "glue" / folder, task)
        (root / "configs").mkdir(exist_ok=True)
        (root / "configs" / f"{task}.yaml").write_text(f"task: {task}\nlearning_rate: 1e-3\nwarmup_ratio: 0.25\n")
    return root


def common(workspace, output_dir):
    return [
        "--model", str(workspace / "bert"), "--data-dir", str(workspace / "glue"),
        "--config-dir", str(workspace / "configs"), "--output-dir", str(output_dir),
    ]  # fmt: skip


def test_without_dropout_both_sides_train_the_same_model(workspace, tmp_path):
    """The same data, tokenisation, head initialisation, data order, optimizer groups (weight decay on), schedule,
    clipping and metric: without dropout the two dev scores agree (STS-B: a Pearson correlation of scores that
    differ per example)."""
    output = tmp_path / "out"
    overrides = [*TINY_SETTINGS, "--max-steps", "3", "--weight-decay", "0.5"]
    completed = check(tmp_path, *common(workspace, output), "--task", "stsb", "--", *overrides)
    assert completed.returncode == 0, completed.stderr[-3000:]
    (result,) = json.loads((output / "comparison.json").read_text())["runs"]
    assert (result["task"], result["seed"], result["main_metric"]) == ("stsb", 1, "pearson")
    assert result["tisa_hf"]["metrics"]["validation"] == pytest.approx(result["trainer"]["metrics"]["validation"])
    assert result["tisa_hf"]["steps"] == result["trainer"]["steps"] == 3
    assert result["settings"]["learning_rate"] == 1e-3 and result["settings"]["warmup_steps"] == 1  # ceil(0.25 x 3)
    assert result["settings"]["weight_decay"] == 0.5 and result["settings"]["max_seq_length"] == 32
    assert result["tisa_hf"]["wall_time_s"] > 0 and result["trainer"]["wall_time_s"] > 0
    pearson = [100 * result[side]["metrics"]["validation"]["pearson"] for side in ("tisa_hf", "trainer")]
    assert 0 < abs(pearson[0]) < 100
    assert f"| stsb | 1 | pearson | {pearson[0]:.1f} | {pearson[1]:.1f} |" in completed.stdout


def test_tisa_settings_are_refused(workspace, tmp_path):
    script = load_script("check_against_trainer")
    argv = script.tisa_hf_argv(script_options(workspace), "rte", 1, ["--tisa.num_kernels", "3"])
    with pytest.raises(ValueError, match="^This check compares the baseline: with TISA, tisa-hf trains the kernels"):
        script.parse_settings(argv, tmp_path / "run")


@pytest.mark.slow
def test_default_tasks_train_on_both_sides(workspace, tmp_path):
    output = tmp_path / "out"
    argv = [*common(workspace, output), "--seeds", "1", "2", "--", *TINY_SETTINGS, "--num-train-epochs", "1"]
    completed = check(tmp_path, *argv)
    assert completed.returncode == 0, completed.stderr[-3000:]
    runs = json.loads((output / "comparison.json").read_text())["runs"]
    assert [(run["task"], run["seed"]) for run in runs] == [("mrpc", 1), ("mrpc", 2), ("stsb", 1), ("stsb", 2)]
    for run in runs:
        assert run["tisa_hf"]["steps"] == run["trainer"]["steps"] == run["settings"]["max_steps"] == 8  # 64 / 8
        assert run["settings"]["warmup_steps"] == 2
        names = {"mrpc": {"accuracy", "f1"}, "stsb": {"pearson", "spearmanr"}}[run["task"]]
        assert set(run["tisa_hf"]["metrics"]["validation"]) == set(run["trainer"]["metrics"]["validation"]) == names
        assert run["tisa_hf"]["metrics"]["validation"] == pytest.approx(run["trainer"]["metrics"]["validation"])

    trainer_record = output / "trainer" / "stsb" / "seed-2" / "metrics.json"
    before = trainer_record.stat().st_mtime_ns
    again = check(tmp_path, *argv)
    assert again.returncode == 0, again.stderr[-3000:]
    assert trainer_record.stat().st_mtime_ns == before  # reused, not rerun
    assert json.loads((output / "comparison.json").read_text())["runs"] == runs


def test_finished_runs_with_other_settings_are_refused(workspace, tmp_path):
    script = load_script("check_against_trainer")
    argv = script.tisa_hf_argv(script_options(workspace), "rte", 1, ["--learning-rate", "1e-4"])
    settings = script.parse_settings(argv, tmp_path / "run")
    record = {"config": script.resolved_config(*settings)}
    script.check_finished(tmp_path / "run", record, settings)  # the same settings: reused
    resolved = {**record["config"], "max_steps": 24, "warmup_steps": 6, "output_dir": "elsewhere", "resume": True}
    script.check_finished(tmp_path / "run", {"config": resolved}, settings)  # what the run resolved itself
    changed = {**record["config"], "learning_rate": 1e-3, "max_seq_length": 64}
    with pytest.raises(ValueError) as error:
        script.check_finished(tmp_path / "run", {"config": changed}, settings)
    assert str(error.value) == (
        f"{tmp_path / 'run'} holds a finished run with other settings (learning_rate, max_seq_length); delete it or "
        "choose another --output-dir."
    )
    fixed = script.parse_settings([*argv, "--max-steps", "10"], tmp_path / "run")
    with pytest.raises(ValueError, match=r"other settings \(max_steps\)"):
        script.check_finished(tmp_path / "run", {"config": resolved}, fixed)


def script_options(workspace):
    return argparse.Namespace(config_dir=workspace / "configs", model=str(workspace / "bert"), data_dir=workspace)
