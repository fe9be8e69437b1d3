"""`scripts/plot_kernels.py`: rebuilds the kernels a run started from and reports how far each layer moved."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import BertModel

import tisa_hf
from tests.fixtures import WORD_PIECE_SIZES, tiny_config

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "plot_kernels.py"
ENVIRONMENT = {**os.environ, "PYTHONPATH": str(ROOT)}  # this checkout's tisa_hf, not an installed one


@pytest.mark.parametrize("init", ["fit", "zeros"])
def test_start_is_rebuilt_and_only_the_changed_layer_moves(tmp_path, init):
    torch.manual_seed(0)
    config = tiny_config("bert", **WORD_PIECE_SIZES, max_position_embeddings=64)
    BertModel(config).save_pretrained(tmp_path / "pretrained")
    tisa = tisa_hf.TisaConfig(num_kernels=2, mode="add", fit_window=16, init=init)
    tuned = BertModel.from_pretrained(tmp_path / "pretrained", tisa=tisa)
    with torch.no_grad():
        tuned.tisa.amplitude[0] += 0.5  # "fine-tuning" moved the first layer only
    tuned.save_pretrained(tmp_path / "run")
    record = {
        "task": "rte",
        "model": str(tmp_path / "pretrained"),
        "tisa": tisa.to_dict(),
        "seed": 1,
        "metrics": {"validation": {"accuracy": 0.5}},
        "versions": {},
        "wall_time_s": 1.0,
        "config": {"task": "rte", "model": str(tmp_path / "pretrained")},
    }
    (tmp_path / "run" / "metrics.json").write_text(json.dumps(record))

    out = tmp_path / "kernels.png"
    result = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path / "run"), "--out", str(out)],
        capture_output=True,
        text=True,
        check=True,
        env=ENVIRONMENT,
    )
    assert out.stat().st_size > 0
    rows = [line.split() for line in result.stdout.splitlines() if line.strip()[:1].isdigit()]
    changes = {int(row[0]): float(row[3]) for row in rows}
    assert sorted(changes) == [0, 1]  # layers counted from 0, as in `tisa-hf analyze` and the demo
    assert changes[1] < 1e-5  # layer 1 is exactly the rebuilt start
    assert changes[0] > 0.01
    relative = {int(row[0]): row[4] for row in rows}
    if init == "zeros":  # flat functions at the start: no spread to compare the change with
        assert relative == {0: "-", 1: "-"}
    else:
        assert float(relative[0]) > 0 and float(relative[1]) < 1e-3


def test_baseline_run_is_refused(tmp_path):
    (tmp_path / "metrics.json").write_text(
        json.dumps(
            {
                "task": "rte",
                "model": "x",
                "tisa": None,
                "seed": 1,
                "metrics": {},
                "versions": {},
                "wall_time_s": 1.0,
                "config": {"task": "rte", "model": "x"},
            }
        )
    )
    result = subprocess.run(
        [sys.executable, str(SCRIPT), str(tmp_path), "--out", str(tmp_path / "k.png")],
        capture_output=True,
        text=True,
        env=ENVIRONMENT,
    )
    assert result.returncode != 0
    assert "has no TISA kernels" in result.stderr
