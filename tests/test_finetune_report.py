import json

import pytest

from tisa_hf.finetune.report import collect, gains, main, render, score_table


def write_run(root, name, task, tisa, metrics, model="albert-base-v2"):
    folder = root / name
    folder.mkdir(parents=True)
    (folder / "metrics.json").write_text(json.dumps({"task": task, "model": model, "tisa": tisa, "metrics": metrics}))


def tisa(kernels, mode="add"):
    return {"num_kernels": kernels, "mode": mode, "init": "fit"}


@pytest.fixture
def runs(tmp_path):
    for seed, value in enumerate((0.70, 0.60, 0.65)):
        write_run(tmp_path, f"rte/base/{seed}", "rte", None, {"validation": {"accuracy": value}})
    for seed, value in enumerate((0.66, 0.68)):
        write_run(tmp_path, f"rte/s1/{seed}", "rte", tisa(1), {"validation": {"accuracy": value}})
    write_run(tmp_path, "rte/s5/0", "rte", tisa(5), {"validation": {"accuracy": 0.72}})
    write_run(tmp_path, "rte/bow/0", "rte", tisa(0, "replace"), {"validation": {"accuracy": 0.80}})
    both = {"validation_matched": {"accuracy": 0.80}, "validation_mismatched": {"accuracy": 0.81}}
    write_run(tmp_path, "mnli/base/0", "mnli", None, both)
    both = {"validation_matched": {"accuracy": 0.82}, "validation_mismatched": {"accuracy": 0.80}}
    write_run(tmp_path, "mnli/s5/0", "mnli", tisa(5), both)
    return tmp_path


def test_medians_seed_counts_and_gains(runs):
    variants = score_table(collect(runs))["albert-base-v2"]
    assert variants["baseline"]["RTE"] == {
        "median": pytest.approx(65.0),
        "min": pytest.approx(60.0),
        "max": pytest.approx(70.0),
        "seeds": 3,
    }
    assert variants["TISA S=1 (add)"]["RTE"] == {
        "median": pytest.approx(67.0),
        "min": pytest.approx(66.0),
        "max": pytest.approx(68.0),
        "seeds": 2,
    }
    # Best TISA (S > 0) is S=5 at 72; the bag-of-words 80 is not a TISA model. Δ% = 7 / (100 - 65) · 100.
    assert gains(variants, "RTE") == (pytest.approx(7.0), pytest.approx(20.0))
    assert gains(variants, "MNLI-m") == (pytest.approx(2.0), pytest.approx(10.0))  # 2 / 20
    assert gains(variants, "MNLI-mm") == (pytest.approx(-1.0), pytest.approx(-100 / 19))


def test_rendered_table(runs):
    lines = render(score_table(collect(runs))).splitlines()
    assert lines[:9] == [
        "### albert-base-v2",
        "",
        "| | MNLI-m | MNLI-mm | RTE |",
        "|---|---|---|---|",
        "| baseline | 80.0 (1) | 81.0 (1) | 65.0 (3) |",
        "| S=0 (bag of words) |  |  | 80.0 (1) |",
        "| TISA S=1 (add) |  |  | 67.0 (2) |",
        "| TISA S=5 (add) | 82.0 (1) | 80.0 (1) | 72.0 (1) |",
        "| Δ | +2.0 | -1.0 | +7.0 |",
    ]
    assert lines[9] == "| Δ% | +10.0 | -5.3 | +20.0 |"


def test_command_writes_the_table_and_picks_metrics(runs, tmp_path):
    write_run(runs, "mrpc/base/0", "mrpc", None, {"validation": {"accuracy": 0.8, "f1": 0.9}})
    out = tmp_path / "table.md"
    assert main([str(runs), "--out", str(out), "--metric", "mrpc=f1"]) == 0
    assert "| baseline | 90.0 (1) | 80.0 (1) | 81.0 (1) | 65.0 (3) |" in out.read_text()  # MRPC column first


def test_spread_shows_min_and_max_over_seeds(runs, capsys):
    assert main([str(runs), "--spread"]) == 0
    text = capsys.readouterr().out
    assert "| baseline | 80.0 [80.0, 80.0] (1) | 81.0 [81.0, 81.0] (1) | 65.0 [60.0, 70.0] (3) |" in text
    assert "median dev score over seeds [min, max] (number of seeds)" in text


def test_mode_keeps_the_baseline_and_that_mode(runs, capsys):
    assert main([str(runs), "--mode", "replace"]) == 0
    rows = [line.split(" |")[0] for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert rows[1:] == ["| baseline", "| S=0 (bag of words)", "| Δ", "| Δ%"]
    assert main([str(runs), "--mode", "add"]) == 0
    rows = [line.split(" |")[0] for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert rows[1:] == ["| baseline", "| TISA S=1 (add)", "| TISA S=5 (add)", "| Δ", "| Δ%"]


def test_no_runs_is_an_error(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    assert f"No metrics.json under {tmp_path}" in capsys.readouterr().err
