"""scripts/step_ratio.py: a round of interleaved stock and TISA steps recorded with what was timed, and the pooled
summary's ratios, medians and differences against numbers worked out here."""

from __future__ import annotations

import json
import re

import pytest

import tisa_hf
from tests.fixtures import load_script


@pytest.fixture(scope="module")
def step_ratio():
    return load_script("step_ratio")


def test_a_run_appends_one_line_of_each_sides_rounds(step_ratio, tmp_path):
    record = tmp_path / "record.jsonl"
    earlier = {"label": "earlier", "ms": {"stock": [1.0], "tisa": [1.0]}}
    record.write_text(json.dumps(earlier) + "\n")
    arguments = ["time", "--label", "here", "--batch", "1", "--length", "8", "--warmup", "0", "--rounds", "2"]
    step_ratio.main([*arguments, "--record", str(record)])
    first, line = (json.loads(text) for text in record.read_text().splitlines())
    assert first == earlier
    keys = ("label", "tisa_hf", "architecture", "step", "implementation", "batch", "length", "dropout")
    assert {key: line[key] for key in keys} == {
        "label": "here",
        "architecture": "bert",
        "step": "train",
        "tisa_hf": tisa_hf.__file__,
        "implementation": "sdpa",
        "batch": 1,
        "length": 8,
        "dropout": 0.1,
    }
    assert all(len(line["ms"][side]) == 2 and min(line["ms"][side]) > 0 for side in ("stock", "tisa"))


def test_a_rope_encoders_inference_rounds_are_recorded_as_such(step_ratio, tmp_path):
    record = tmp_path / "record.jsonl"
    arguments = ["time", "--label", "mb", "--architecture", "modernbert", "--step", "infer", "--batch", "1"]
    step_ratio.main([*arguments, "--length", "8", "--warmup", "0", "--rounds", "1", "--record", str(record)])
    line = json.loads(record.read_text())
    assert (line["architecture"], line["step"]) == ("modernbert", "infer")
    assert all(len(line["ms"][side]) == 1 for side in ("stock", "tisa"))


def test_the_summary_pools_each_label_and_both_and_gives_their_differences(step_ratio, tmp_path, capsys):
    record = tmp_path / "record.jsonl"
    runs = [
        {"label": "old", "ms": {"stock": [100.0, 100.0], "tisa": [100.0, 110.0]}},
        {"label": "old", "ms": {"stock": [100.0], "tisa": [120.0]}},
        {"label": "new", "ms": {"stock": [200.0, 200.0, 200.0], "tisa": [200.0, 200.0, 200.0]}},
    ]
    record.write_text("".join(json.dumps(run) + "\n" for run in runs))
    step_ratio.main(["summarize", str(record)])
    lines = capsys.readouterr().out.splitlines()
    number = r"[+-]?\d+\.?\d*"
    assert re.fullmatch(
        rf"old: 3 paired rounds, TISA ÷ stock median 1\.100 \[95% bootstrap ({number}), ({number})\], rounds 1\.000 to "
        r"1\.200; median step: stock 100 ms, TISA 110 ms",
        lines[0],
    )
    assert lines[1].startswith("new: 3 paired rounds, TISA ÷ stock median 1.000 [95% bootstrap 1.000, 1.000]")
    assert lines[2].startswith("both: 6 paired rounds, TISA ÷ stock median 1.000 ")  # ratios 1, 1.1, 1.2, 1, 1, 1
    assert [line.split(" [")[0] for line in lines[3:]] == [
        "new - old, median ratio: -0.100",
        "new - old, median tisa: +90",
        "new - old, median stock: +100",
    ]
