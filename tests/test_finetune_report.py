import json

import numpy as np
import pytest

from tisa_hf.commands import cli
from tisa_hf.experiments.report import collect, gains, render, render_paired, score_table
from tisa_hf.finetune.glue.metrics import glue_metrics
from tisa_hf.finetune.predictions import RunPredictions, SplitPredictions
from tisa_hf.finetune.run_folder import PREDICTIONS_FILE

main = cli.entry("report")  # `tisa-hf report`


def write_run(root, name, task, tisa, metrics, model="albert-base-v2", seed=None):
    folder = root / name
    folder.mkdir(parents=True)
    record = {"task": task, "model": model, "tisa": tisa, "metrics": metrics}
    (folder / "metrics.json").write_text(json.dumps(record if seed is None else {**record, "seed": seed}))


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
    text = capsys.readouterr().out
    rows = [line.split(" |")[0] for line in text.splitlines() if line.startswith("| ")]
    assert rows[1:] == ["| baseline", "| S=0 (bag of words)"]  # no TISA model (S > 0): no gains to show
    assert "Δ" not in text
    assert main([str(runs), "--mode", "add"]) == 0
    rows = [line.split(" |")[0] for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert rows[1:] == ["| baseline", "| TISA S=1 (add)", "| TISA S=5 (add)", "| Δ", "| Δ%"]


def test_seeds_keep_only_those_runs(tmp_path, capsys):
    for seed, value in ((1, 0.70), (2, 0.60)):
        write_run(tmp_path, f"rte/base/{seed}", "rte", None, {"validation": {"accuracy": value}}, seed=seed)
    assert main([str(tmp_path), "--seeds", "2"]) == 0
    assert "| baseline | 60.0 (1) |" in capsys.readouterr().out
    assert main([str(tmp_path), "--seeds", "3", "4"]) == 2
    assert capsys.readouterr().err == (
        f"tisa-hf report: No run of seed(s) 3, 4 under {tmp_path}; its runs have seed(s) 1, 2.\n"
    )


def test_several_folders_report_only_their_runs(runs, capsys):
    assert main([str(runs / "rte" / "base"), str(runs / "rte" / "s5"), str(runs / "rte" / "base" / "0")]) == 0
    rows = [line.split(" |")[:2] for line in capsys.readouterr().out.splitlines() if line.startswith("| ")]
    assert rows[1:3] == [["| baseline", " 65.0 (3)"], ["| TISA S=5 (add)", " 72.0 (1)"]]
    assert main([str(runs / "sst2"), str(runs / "qqp")]) == 2
    assert capsys.readouterr().err == (
        f"tisa-hf report: No metrics.json under {runs / 'sst2'}, {runs / 'qqp'}; point report at the folder holding "
        "the runs.\n"
    )


def test_no_runs_is_an_error(tmp_path, capsys):
    assert main([str(tmp_path)]) == 2
    assert f"No metrics.json under {tmp_path}" in capsys.readouterr().err


def write_full_run(root, name, task, tisa, seed, predictions, config=None):
    """A run folder as `tisa-hf glue` leaves it: metrics.json with its seed, config and history, and
    predictions.json; the metrics are computed from the predictions."""
    folder = root / name
    folder.mkdir(parents=True)
    metrics = {"validation": glue_metrics(task, predictions.logits, predictions.labels)}
    record = {
        "task": task,
        "model": "tiny",
        "tisa": tisa,
        "seed": seed,
        "metrics": metrics,
        "best_step": None,
        "history": [{"step": 10, "metrics": metrics}],
        "steps": 10,
        "steps_per_epoch": 5,
        "wall_time_s": 1.5,
        "config": {"task": task, "seed": seed, "learning_rate": 1e-4, "output_dir": str(folder), **(config or {})},
    }
    (folder / "metrics.json").write_text(json.dumps(record))
    (folder / PREDICTIONS_FILE).write_text(json.dumps(RunPredictions(task, 10, {"validation": predictions}).to_json()))


def right_share(labels, accuracy, rng):
    right = rng.random(len(labels)) < accuracy
    return SplitPredictions(np.eye(2, dtype=np.float32)[np.where(right, labels, 1 - labels)], labels)


@pytest.fixture
def paired_runs(tmp_path):
    """RTE: baseline 70%, TISA add 85% and TISA replace about as good as the baseline; STS-B: baseline and add."""
    rng = np.random.default_rng(0)
    labels = rng.integers(0, 2, 300)
    scores = rng.uniform(0, 5, 300)
    for seed in (1, 2, 3):
        write_full_run(tmp_path, f"rte/base/seed-{seed}", "rte", None, seed, right_share(labels, 0.70, rng))
        write_full_run(tmp_path, f"rte/add/seed-{seed}", "rte", tisa(5), seed, right_share(labels, 0.85, rng))
        replace = right_share(labels, 0.70, rng)
        write_full_run(tmp_path, f"rte/replace/seed-{seed}", "rte", tisa(5, "replace"), seed, replace)
        noisy = SplitPredictions((scores + rng.normal(0, 2, 300))[:, None].astype(np.float32), scores)
        write_full_run(tmp_path, f"stsb/base/seed-{seed}", "stsb", None, seed, noisy)
    for seed in (1, 2):
        noisier = SplitPredictions((scores + rng.normal(0, 4, 300))[:, None].astype(np.float32), scores)
        write_full_run(tmp_path, f"stsb/add/seed-{seed}", "stsb", tisa(5), seed, noisier)
    return tmp_path


def test_json_record_round_trips_every_run(paired_runs, tmp_path):
    out = tmp_path / "report.json"
    assert main([str(paired_runs), "--json", str(out)]) == 0
    document = json.loads(out.read_text())
    assert document["runs"] == collect(paired_runs)
    assert len(document["runs"]) == len(list(paired_runs.rglob("metrics.json"))) == 14
    first = next(run for run in document["runs"] if run["run_dir"] == str(paired_runs / "rte/add/seed-1"))
    assert first["variant"] == "TISA S=5 (add)" and first["seed"] == 1 and first["steps"] == 10
    assert first["history"][0]["step"] == 10 and first["wall_time_s"] == 1.5
    assert first["config"]["learning_rate"] == 1e-4
    assert "paired" not in document


def test_runs_that_differ_in_a_setting_are_different_variants(paired_runs, tmp_path):
    rng = np.random.default_rng(1)
    labels = rng.integers(0, 2, 50)
    config = {"learning_rate": 3e-5, "report_to": "none", "tisa_mode": "replace"}
    write_full_run(paired_runs, "rte/base-lr/seed-1", "rte", None, 1, right_share(labels, 0.7, rng), config)
    variants = {(run["task"], run["variant"]) for run in collect(paired_runs)}
    # Only the learning rate tells the baselines apart: run plumbing and TISA options of runs without TISA don't.
    assert ("rte", "baseline (learning_rate=3e-05)") in variants
    assert ("rte", "baseline (learning_rate=0.0001)") in variants
    assert ("stsb", "baseline (learning_rate=0.0001)") in variants
    assert ("rte", "TISA S=5 (add)") in variants and ("rte", "baseline") not in variants


def test_paired_differences_to_the_baseline(paired_runs, tmp_path, capsys):
    out = tmp_path / "report.json"
    argv = [str(paired_runs), "--paired", "baseline", "--bootstrap", "200", "--json", str(out)]
    assert main(argv) == 0
    text = capsys.readouterr().out
    entries = json.loads(out.read_text())["paired"]["differences"]
    assert [(e["column"], e["variant"], e["seeds"]) for e in entries] == [
        ("STS-B", "TISA S=5 (add)", [1, 2]),
        ("RTE", "TISA S=5 (add)", [1, 2, 3]),
        ("RTE", "TISA S=5 (replace)", [1, 2, 3]),
    ]
    stsb_add, rte_add, rte_replace = entries
    runs = {(run["task"], run["variant"], run["seed"]): run for run in collect(paired_runs)}
    for entry, metric in ((stsb_add, "pearson"), (rte_add, "accuracy")):
        direct = [
            100 * runs[(entry["task"], entry["variant"], s)]["metrics"]["validation"][metric]
            - 100 * runs[(entry["task"], "baseline", s)]["metrics"]["validation"][metric]
            for s in entry["seeds"]
        ]
        assert entry["differences"] == pytest.approx(direct)
    assert rte_add["low"] < 15.0 < rte_add["high"] and rte_add["excludes_zero"]
    assert rte_replace["low"] < 0 < rte_replace["high"] and not rte_replace["excludes_zero"]
    assert stsb_add["high"] < 0 and stsb_add["excludes_zero"]  # noisier scores correlate less

    assert "| | STS-B | RTE |" in text  # the median table is still there, followed by the paired one
    assert "### tiny: paired differences to baseline" in text
    assert "Cells: variant minus baseline in points, the mean over seeds" in text
    cell = f"{rte_add['mean']:+.1f} [{rte_add['low']:+.1f}, {rte_add['high']:+.1f}]* (3)"
    replace_cell = f"{rte_replace['mean']:+.1f} [{rte_replace['low']:+.1f}, {rte_replace['high']:+.1f}] (3)"
    stsb_cell = f"{stsb_add['mean']:+.1f} [{stsb_add['low']:+.1f}, {stsb_add['high']:+.1f}]* (2)"
    assert f"| TISA S=5 (add) | {stsb_cell} | {cell} |" in text
    assert f"| TISA S=5 (replace) |  | {replace_cell} |" in text
    assert f"Intervals that exclude 0: STS-B TISA S=5 (add) {stsb_cell}; RTE TISA S=5 (add) {cell}." in text

    argv = [str(paired_runs), "--paired", "TISA S=5 (add)", "--bootstrap", "200", "--json", str(out)]
    assert main(argv) == 0  # any variant can be the reference
    text = capsys.readouterr().out
    assert "### tiny: paired differences to TISA S=5 (add)" in text
    assert "Cells: variant minus TISA S=5 (add) in points" in text
    flipped = {(e["column"], e["variant"]): e for e in json.loads(out.read_text())["paired"]["differences"]}
    assert flipped[("RTE", "baseline")]["mean"] == pytest.approx(-rte_add["mean"])


def test_a_bound_that_rounds_to_zero_keeps_its_sign_and_first_digit():
    entry = {
        "model": "minilm",
        "column": "STS-B",
        "variant": "S=0 (bag of words)",
        "baseline": "baseline",
        "seeds": [1, 2, 3],
        "mean": -9.263,
        "low": -25.63,
        "high": -0.0095,
        "excludes_zero": True,
    }
    text = render_paired([entry], replicates=1000)
    assert "| S=0 (bag of words) | -9.3 [-25.6, -0.009]* (3) |" in text
    assert "Intervals that exclude 0: STS-B S=0 (bag of words) -9.3 [-25.6, -0.009]* (3)." in text
    assert "| S=0 (bag of words) | +0.0 [-0.8, +0.8] (3) |" in render_paired(
        [{**entry, "mean": 0.0, "low": -0.8, "high": 0.8, "excludes_zero": False}]
    )


def test_paired_needs_the_baseline_and_the_predictions(paired_runs, capsys):
    assert main([str(paired_runs), "--paired", "TISA S=1 (add)"]) == 2
    assert "--paired 'TISA S=1 (add)': no such variant for tiny; its variants are baseline, TISA S=5 (add)" in (
        capsys.readouterr().err
    )
    (paired_runs / "rte/add/seed-2" / PREDICTIONS_FILE).unlink()
    assert main([str(paired_runs), "--paired", "baseline"]) == 2
    error = capsys.readouterr().err
    assert (
        f"1 run(s) have no predictions.json (made before runs saved them): {paired_runs / 'rte/add/seed-2'}." in error
    )


def test_settings_older_runs_lack_or_that_act_through_the_step_counts_do_not_split_variants(paired_runs):
    rng = np.random.default_rng(2)
    labels = rng.integers(0, 2, 50)
    newer = {"num_train_epochs": 3.0, "warmup_ratio": 0.1, "overwrite_output_dir": False, "added_later": True}
    write_full_run(paired_runs, "rte/base/seed-4", "rte", None, 4, right_share(labels, 0.7, rng), newer)
    variants = {run["variant"] for run in collect(paired_runs) if run["task"] == "rte" and not run["tisa"]}
    assert variants == {"baseline"}


def test_the_report_names_the_machines_and_warns_when_devices_mix(runs, capsys):
    cpu = {"device": "cpu", "gpu": None, "processor": "AMD EPYC", "cpu_count": 2, "torch_threads": 2}
    gpu = {"device": "cuda", "gpu": "NVIDIA H200", "processor": "Intel Xeon", "cpu_count": 16, "torch_threads": 16}
    for name, machine in (("rte/base/0", cpu), ("rte/base/1", cpu), ("rte/s5/0", gpu)):
        path = runs / name / "metrics.json"
        path.write_text(json.dumps({**json.loads(path.read_text()), "machine": machine}))
    assert main([str(runs)]) == 0
    assert capsys.readouterr().out.rstrip().splitlines()[-1] == (
        "Machines: 6 run(s) with no machine recorded; 2 run(s) on cpu (AMD EPYC, 2 cores, 2 torch threads); "
        "1 run(s) on cuda (NVIDIA H200). The runs mix devices (cpu, cuda): report each device's runs in a table of "
        "its own."
    )


def test_runs_from_an_adapted_checkpoint_join_the_table_of_the_model_it_came_from(tmp_path):
    adapted = {"from": "minilm", "objective": "distill", "train": "all"}
    for seed, (base, replace, tuned) in enumerate(((0.60, 0.55, 0.58), (0.70, 0.50, 0.66)), start=1):
        write_run(tmp_path, f"rte/base/{seed}", "rte", None, {"validation": {"accuracy": base}}, "minilm", seed)
        metrics = {"validation": {"accuracy": replace}}
        write_run(tmp_path, f"rte/replace/{seed}", "rte", tisa(5, "replace"), metrics, "minilm", seed)
        folder = tmp_path / f"rte/adapted/{seed}"
        write_run(tmp_path, f"rte/adapted/{seed}", "rte", tisa(5, "replace"), {}, "runs/adapt/s5-all", seed)
        record = json.loads((folder / "metrics.json").read_text())
        record.update(metrics={"validation": {"accuracy": tuned}}, adapted=adapted)
        (folder / "metrics.json").write_text(json.dumps(record))
    table = score_table(collect(tmp_path))
    assert list(table) == ["minilm"]  # not a table of its own under runs/adapt/s5-all
    adapted_row = table["minilm"]["TISA S=5 (replace), adapted (distill, trained: all)"]
    assert adapted_row["RTE"]["median"] == pytest.approx(62.0)
    assert table["minilm"]["TISA S=5 (replace)"]["RTE"]["median"] == pytest.approx(52.5)


def test_a_run_with_non_finite_metrics_never_enters_a_table_and_the_report_says_so(tmp_path, capsys):
    # The reported case: seeds {NaN, 53.3, -3.6} printed as "the median -3.6 of 3 seeds".
    for seed, value in ((1, float("nan")), (2, 0.533), (3, -0.036)):
        write_run(
            tmp_path, f"cola/base/{seed}", "cola", None, {"validation": {"matthews_correlation": value}}, seed=seed
        )
    left_out = []
    cell = score_table(collect(tmp_path, left_out=left_out))["albert-base-v2"]["baseline"]["CoLA"]
    assert cell == {"median": pytest.approx(24.85), "min": pytest.approx(-3.6), "max": pytest.approx(53.3), "seeds": 2}
    assert left_out == [
        f"{tmp_path / 'cola/base/1'}: {tmp_path / 'cola/base/1/metrics.json'} holds non-finite metrics "
        "(validation/matthews_correlation=nan): the run diverged or its data held NaN/inf, so it is no result; train "
        "it again (`tisa-hf sweep` re-runs it once the folder is removed)."
    ]
    assert main([str(tmp_path)]) == 0
    printed = capsys.readouterr().out
    assert "24.9 (2)" in printed
    assert f"Left out of every table (1 run(s)):\n- {tmp_path / 'cola/base/1'}: " in printed
