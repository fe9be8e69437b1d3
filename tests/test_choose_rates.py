"""scripts/choose_rates.py: the rate of each configuration from its fold's validation scores, the ties, and the
configurations still waiting for runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from tests.fixtures import load_script


@pytest.fixture(scope="module")
def choose_rates():
    return load_script("choose_rates")


def write_sweep(root: Path) -> Path:
    variants = {f"{name}-lr-{rate}": {} for name in ("head-512", "s5-1024", "s0-1024") for rate in ("5e-5", "1e-4")}
    sweep = {"output_dir": str(root / "runs"), "tasks": ["hp"], "folds": [0, 1], "seeds": [2, 3], "variants": variants}
    path = root / "sweep.yaml"
    path.write_text(yaml.safe_dump(sweep, sort_keys=False))
    return path


def finish(root: Path, variant: str, f1: float, accuracy: float, fold: int = 0) -> Path:
    folder = root / "runs" / "hp" / variant / f"fold-{fold}" / "seed-2"
    folder.mkdir(parents=True)
    metrics = {"validation": {"f1": f1, "accuracy": accuracy}, "test": {"f1": 0.5, "accuracy": 0.5}}
    (folder / "metrics.json").write_text(json.dumps({"task": "hp", "model": "m", "tisa": None, "metrics": metrics}))
    return folder


def test_best_validation_f1_wins_then_accuracy_then_the_lower_rate(choose_rates, tmp_path, capsys):
    sweep = write_sweep(tmp_path)
    finish(tmp_path, "head-512-lr-5e-5", 0.80, 0.85)
    finish(tmp_path, "head-512-lr-1e-4", 0.82, 0.80)  # the higher F1
    finish(tmp_path, "s5-1024-lr-5e-5", 0.70, 0.75)
    finish(tmp_path, "s5-1024-lr-1e-4", 0.70, 0.75)  # a tie throughout: the lower rate
    finish(tmp_path, "s0-1024-lr-5e-5", 0.60, 0.70)
    finish(tmp_path, "s0-1024-lr-1e-4", 0.60, 0.72)  # the same F1, the higher accuracy
    finish(tmp_path, "head-512-lr-5e-5", 0.99, 0.99, fold=1)  # another fold does not choose
    assert choose_rates.main([str(sweep)]) == 0
    assert capsys.readouterr().out == "head-512-lr-1e-4 s5-1024-lr-5e-5 s0-1024-lr-1e-4\n"
    assert choose_rates.main([str(sweep), "--folders"]) == 0
    folders = [
        str(tmp_path / "runs" / "hp" / name) for name in ("head-512-lr-1e-4", "s5-1024-lr-5e-5", "s0-1024-lr-1e-4")
    ]
    assert capsys.readouterr().out == " ".join(folders) + "\n"
    record = json.loads((tmp_path / "runs" / "chosen_rates.json").read_text())
    assert record["chosen"]["hp/head-512"]["validation"] == {"f1": 0.82, "accuracy": 0.80}
    assert [run["rate"] for run in record["candidates"]["hp/s5-1024"]] == [5e-5, 1e-4]


def test_configurations_with_unfinished_runs_wait(choose_rates, tmp_path, capsys):
    sweep = write_sweep(tmp_path)
    with pytest.raises(choose_rates.UsageError) as error:
        choose_rates.main([str(sweep)])
    assert str(error.value) == (
        f"No configuration has all its runs of fold 0 finished; run `tisa-hf sweep --config {sweep} --folds 0` first."
    )
    finish(tmp_path, "head-512-lr-5e-5", 0.80, 0.85)
    finish(tmp_path, "head-512-lr-1e-4", 0.82, 0.80)
    finish(tmp_path, "s5-1024-lr-1e-4", 0.90, 0.90)
    capsys.readouterr()
    assert choose_rates.main([str(sweep)]) == 0
    captured = capsys.readouterr()
    assert captured.out == "head-512-lr-1e-4\n"
    waiting = [
        tmp_path / "runs" / "hp" / name / "fold-0" / "seed-2"
        for name in ("s5-1024-lr-5e-5", "s0-1024-lr-5e-5", "s0-1024-lr-1e-4")
    ]
    assert captured.err == (f"choose_rates.py: waiting for unfinished runs of fold 0: {', '.join(map(str, waiting))}\n")
