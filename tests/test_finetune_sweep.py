import json
import re
from pathlib import Path

import pytest
import yaml

from tests.fixtures import write_rte_tsv, write_tiny_model
from tisa_hf.commands.cli import entry
from tisa_hf.experiments.sweep import COMMANDS, plan
from tisa_hf.finetune.arguments import parse_arguments

main = entry("sweep")  # `tisa-hf sweep`

ROOT = Path(__file__).resolve().parents[1]


def write_sweep(tmp_path, **extra):
    """A sweep over RTE, its data in `tmp_path` (the files checked before any run; tests that run one write them
    whole)."""
    for task in ("RTE", "MRPC", "CoLA"):
        (tmp_path / task).mkdir(exist_ok=True)
        (tmp_path / task / "train.tsv").touch()
    (tmp_path / "glue").mkdir(exist_ok=True)
    (tmp_path / "glue" / "rte.yaml").write_text("task: rte\nmax_steps: 4\n")
    sweep = {
        "model": str(tmp_path / "bert"),
        "output_dir": str(tmp_path / "runs"),
        "config_dir": "glue",
        "tasks": ["rte"],
        "seeds": [1, 2],
        "variants": {"baseline": {}, "s3-replace": {"tisa": {"num_kernels": 3, "mode": "replace"}}},
        "settings": {"data_dir": str(tmp_path), "no_tracking": True},
        **extra,
    }
    path = tmp_path / "sweep.yaml"
    path.write_text(json.dumps(sweep))  # JSON is YAML
    return path


def test_plan_skips_finished_runs_and_resumes_interrupted_ones(tmp_path):
    sweep = write_sweep(tmp_path, launcher="accelerate launch --num_processes 2")
    (tmp_path / "runs/rte/baseline/seed-1").mkdir(parents=True)
    (tmp_path / "runs/rte/baseline/seed-1/metrics.json").write_text("{}")
    (tmp_path / "runs/rte/s3-replace/seed-2/checkpoints/step-4").mkdir(parents=True)
    (tmp_path / "runs/rte/s3-replace/seed-2/checkpoints/step-4/trainer_state.json").write_text("{}")
    # A best model without a complete checkpoint (killed before the first one): nothing to resume from.
    (tmp_path / "runs/rte/s3-replace/seed-1/checkpoints/best-step-2").mkdir(parents=True)
    runs = plan(sweep)
    assert [(run.variant, run.seed, run.status) for run in runs] == [
        ("baseline", 1, "done"),
        ("s3-replace", 1, "new"),
        ("baseline", 2, "new"),
        ("s3-replace", 2, "resume"),
    ]
    last = runs[-1].command
    assert last[:6] == ["accelerate", "launch", "--num_processes", "2", "-m", "tisa_hf.commands.glue"]
    assert last[last.index("--tisa.num_kernels") + 1] == "3" and last[last.index("--tisa.mode") + 1] == "replace"
    assert last[last.index("--config") + 1] == str(tmp_path / "glue" / "rte.yaml")
    assert last[-5:-1] == ["--seed", "2", "--output_dir", str(tmp_path / "runs/rte/s3-replace/seed-2")]
    assert last[-1] == "--resume" and "--resume" not in runs[1].command and "--resume" not in runs[2].command
    assert "--tisa.num_kernels" not in runs[2].command


def test_seeds_are_the_outer_loop(tmp_path):
    sweep = write_sweep(tmp_path, tasks=["rte", "mrpc"], seeds=[1, 2, 3])
    (tmp_path / "glue" / "mrpc.yaml").write_text("task: mrpc\n")
    runs = [(run.seed, run.task, run.variant) for run in plan(sweep)]
    cells = [(task, variant) for task in ("rte", "mrpc") for variant in ("baseline", "s3-replace")]
    assert runs == [(seed, task, variant) for seed in (1, 2, 3) for task, variant in cells]


def test_tasks_and_seeds_select_a_part_of_the_grid_in_its_order(tmp_path):
    sweep = write_sweep(tmp_path, tasks=["rte", "mrpc", "cola"], seeds=[1, 2, 3])
    for task in ("mrpc", "cola"):
        (tmp_path / "glue" / f"{task}.yaml").write_text(f"task: {task}\n")
    runs = [(run.seed, run.task, run.variant) for run in plan(sweep, tasks=["cola", "rte"], seeds=[3, 1])]
    cells = [(task, variant) for task in ("rte", "cola") for variant in ("baseline", "s3-replace")]
    assert runs == [(seed, task, variant) for seed in (1, 3) for task, variant in cells]
    assert {run.output_dir for run in plan(sweep, seeds=[2])} == {
        tmp_path / "runs" / task / variant / "seed-2"
        for task in ("rte", "mrpc", "cola")
        for variant in ("baseline", "s3-replace")
    }


def test_tasks_and_seeds_outside_the_grid_are_refused(tmp_path, capsys):
    sweep = write_sweep(tmp_path)
    assert main(["--config", str(sweep), "--tasks", "rte", "sst2"]) == 2
    assert capsys.readouterr().err == (f"tisa-hf sweep: Sweep file {sweep}: --tasks sst2 not among its tasks (rte).\n")
    assert main(["--config", str(sweep), "--seeds", "1", "7", "8"]) == 2
    assert capsys.readouterr().err == f"tisa-hf sweep: Sweep file {sweep}: --seeds 7, 8 not among its seeds (1, 2).\n"


def test_missing_task_config_is_refused_before_any_run(tmp_path):
    sweep = write_sweep(tmp_path, tasks=["rte", "cola"])
    with pytest.raises(ValueError, match=rf"no task config {tmp_path / 'glue' / 'cola.yaml'} \(set config_dir\)"):
        plan(sweep)


def test_bad_sweep_file_names_the_keys(tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text("model: x\ntask: [rte]\n")
    with pytest.raises(ValueError, match=r"missing key\(s\) output_dir, tasks, seeds, variants, unknown key\(s\) task"):
        plan(path)


def test_sweep_runs_only_what_is_missing(tmp_path, monkeypatch, capsys):
    write_tiny_model(tmp_path / "bert")
    write_rte_tsv(tmp_path / "RTE")
    sweep = write_sweep(tmp_path)
    sweep.write_text(sweep.read_text().replace('"seeds": [1, 2]', '"seeds": [1]'))
    finished = tmp_path / "runs/rte/baseline/seed-1"
    finished.mkdir(parents=True)
    (finished / "metrics.json").write_text('{"kept": true}')
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.chdir(ROOT)
    assert main(["--config", str(sweep)]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith("[1/2] rte baseline seed 1: done  ")
    assert lines[1] == "[2/2] rte s3-replace seed 1: starting"
    assert re.fullmatch(r"\[2/2\] rte s3-replace seed 1: finished in \d+\.\d min", lines[2])
    result = json.loads((tmp_path / "runs/rte/s3-replace/seed-1/metrics.json").read_text())
    assert result["steps"] == 4 and result["seed"] == 1
    assert (result["tisa"]["num_kernels"], result["tisa"]["mode"]) == (3, "replace")
    assert json.loads((finished / "metrics.json").read_text()) == {"kept": True}


def test_a_finished_run_made_with_other_settings_stops_the_sweep_before_any_run(tmp_path):
    """An edited task config would otherwise leave the old run in place, reported as a run of the new settings."""
    sweep = write_sweep(tmp_path)
    finished = tmp_path / "runs/rte/baseline/seed-2"
    finished.mkdir(parents=True)
    recorded = {"task": "rte", "max_steps": 4, "learning_rate": 2e-05, "seed": 2, "output_dir": "elsewhere"}
    (finished / "metrics.json").write_text(json.dumps({"config": recorded}))
    assert plan(sweep)[2].status == "done"  # the same settings (the folder is not one of them)

    (tmp_path / "glue" / "rte.yaml").write_text("task: rte\nmax_steps: 8\nlearning_rate: 1.0e-4\n")
    message = (
        f"Sweep file {sweep}: finished run(s) were made with other settings than the sweep now gives them: "
        f"{finished} (learning_rate: 2e-05 -> 0.0001; max_steps: 4 -> 8). Delete those runs to redo them, or give "
        "the sweep another output_dir."
    )
    with pytest.raises(ValueError) as error:
        plan(sweep)
    assert str(error.value) == message
    assert main(["--config", str(sweep)]) == 2
    assert json.loads((finished / "metrics.json").read_text()) == {"config": recorded}


def test_per_task_settings_override_a_variants_settings_for_their_task_only(tmp_path):
    """A control tuned on its own learning-rate grid: its rate differs on some tasks."""
    s0 = {
        "tisa": {"num_kernels": 0, "mode": "replace"},
        "learning_rate": 3e-5,
        "per_task": {"cola": {"learning_rate": 1e-4, "tisa": {"mode": "add"}}},
    }
    sweep = write_sweep(tmp_path, tasks=["rte", "cola"], seeds=[1], variants={"s0": s0})
    (tmp_path / "glue" / "cola.yaml").write_text("task: cola\n")
    rte, cola = plan(sweep)
    assert rte.command[rte.command.index("--tisa.num_kernels") :] == [
        *("--tisa.num_kernels", "0", "--tisa.mode", "replace", "--learning_rate", "3e-05"),
        *("--seed", "1", "--output_dir", str(tmp_path / "runs/rte/s0/seed-1")),
    ]
    assert cola.command[cola.command.index("--tisa.num_kernels") :] == [
        *("--tisa.num_kernels", "0", "--tisa.mode", "add", "--learning_rate", "0.0001"),
        *("--seed", "1", "--output_dir", str(tmp_path / "runs/cola/s0/seed-1")),
    ]


def test_per_task_settings_for_a_task_outside_the_grid_are_refused(tmp_path):
    variants = {"s0": {"per_task": {"cola": {"learning_rate": 1e-4}, "qnli": {}}}}
    sweep = write_sweep(tmp_path, variants=variants)
    message = f"Sweep file {sweep}: variant s0 has per_task settings for cola, qnli, not among its tasks (rte)."
    with pytest.raises(ValueError) as error:
        plan(sweep)
    assert str(error.value) == message


def test_a_failed_run_is_reported_and_the_sweep_goes_on_to_the_next(tmp_path, monkeypatch, capsys):
    write_tiny_model(tmp_path / "bert")  # no RTE data: every run stops at loading it
    sweep = write_sweep(tmp_path)
    sweep.write_text(sweep.read_text().replace('"seeds": [1, 2]', '"seeds": [1]'))
    monkeypatch.setenv("PYTHONPATH", str(ROOT))
    monkeypatch.chdir(ROOT)
    capsys.readouterr()  # drop the tiny model's saving output
    assert main(["--config", str(sweep)]) == 1
    captured = capsys.readouterr()
    assert captured.out.splitlines() == [
        "[1/2] rte baseline seed 1: starting",
        "[1/2] rte baseline seed 1: failed (exit code 2)",
        "[2/2] rte s3-replace seed 1: starting",
        "[2/2] rte s3-replace seed 1: failed (exit code 2)",
    ]
    assert captured.err == "tisa-hf sweep: 2 run(s) failed: [1/2] rte baseline seed 1; [2/2] rte s3-replace seed 1\n"


def write_fold_sweep(tmp_path, **extra):
    (tmp_path / "longdoc").mkdir(exist_ok=True)
    (tmp_path / "longdoc" / "hp.yaml").write_text("max_steps: 4\n")
    variants = {"head-512": {}, "s5-2048": {"max_seq_length": 2048, "tisa": {"num_kernels": 5, "mode": "replace"}}}
    return write_sweep(
        tmp_path, command="classify", config_dir="longdoc", tasks=["hp"], folds=[0, 1, 2], variants=variants,
        settings={"data_dir": str(tmp_path)}, **extra,
    )  # fmt: skip


def test_folds_run_fold_by_fold_within_each_seed_into_folders_of_their_own(tmp_path):
    sweep = write_fold_sweep(tmp_path)
    runs = plan(sweep)
    cells = [(fold, variant) for fold in (0, 1, 2) for variant in ("head-512", "s5-2048")]
    assert [(run.seed, run.fold, run.variant) for run in runs] == [(seed, *cell) for seed in (1, 2) for cell in cells]
    last = runs[-1]
    assert last.label == "hp s5-2048 fold 2 seed 2"
    assert last.output_dir == tmp_path / "runs/hp/s5-2048/fold-2/seed-2"
    assert last.command[1:3] == ["-m", "tisa_hf.commands.classify"]
    assert last.command[-6:] == ["--fold", "2", "--seed", "2", "--output_dir", str(last.output_dir)]
    part = plan(sweep, seeds=[2], folds=[2, 0])
    assert [(run.seed, run.fold) for run in part] == [(2, 0), (2, 0), (2, 2), (2, 2)]


def test_folds_outside_the_grid_or_of_a_glue_sweep_are_refused(tmp_path):
    sweep = write_fold_sweep(tmp_path)
    with pytest.raises(ValueError) as error:
        plan(sweep, folds=[3])
    assert str(error.value) == f"Sweep file {sweep}: --folds 3 not among its folds (0, 1, 2)."
    glue = write_sweep(tmp_path, folds=[0])
    with pytest.raises(ValueError) as error:
        plan(glue)
    assert str(error.value) == (
        f"Sweep file {glue}: folds are folds of document classification; set command: classify."
    )


def test_a_model_folder_the_sweep_requires_must_exist_before_anything_is_planned(tmp_path):
    adapted = tmp_path / "adapt" / "s5-all"
    sweep = write_fold_sweep(tmp_path, requires={str(adapted): "bash scripts/adapt_minilm.sh"})
    with pytest.raises(ValueError) as error:
        plan(sweep)
    assert str(error.value) == (
        f"Sweep file {sweep}: the model folder {adapted} does not exist yet; make it first with "
        "`bash scripts/adapt_minilm.sh` (or set the path in the sweep file)."
    )
    adapted.mkdir(parents=True)
    assert len(plan(sweep)) == 12


def test_variants_run_a_part_of_the_grid_and_need_only_the_models_they_read(tmp_path):
    adapted = tmp_path / "adapt" / "s5-all"
    sweep = write_fold_sweep(tmp_path, requires={str(adapted): "bash scripts/adapt_minilm.sh"})
    variants = yaml.safe_load(sweep.read_text())["variants"]
    variants["s5-adapted"] = {"max_seq_length": 2048, "model": str(adapted)}
    sweep.write_text(yaml.safe_dump({**yaml.safe_load(sweep.read_text()), "variants": variants}))
    part = plan(sweep, folds=[1], variants=["s5-2048", "head-512"])  # the file's order, not the option's
    assert [(run.seed, run.fold, run.variant) for run in part] == [
        (seed, 1, variant) for seed in (1, 2) for variant in ("head-512", "s5-2048")
    ]
    with pytest.raises(ValueError) as error:
        plan(sweep, variants=["s5-adapted"])
    assert str(error.value).startswith(f"Sweep file {sweep}: the model folder {adapted} does not exist yet;")
    with pytest.raises(ValueError) as error:
        plan(sweep, variants=["s5"])
    assert str(error.value) == (
        f"Sweep file {sweep}: --variants s5 not among its variants (head-512, s5-2048, s5-adapted)."
    )


def test_a_variants_own_model_replaces_the_sweeps_in_its_command(tmp_path):
    adapted = tmp_path / "adapt" / "s5-all"
    adapted.mkdir(parents=True)
    sweep = write_fold_sweep(tmp_path, requires={str(adapted): "bash scripts/adapt_minilm.sh"})
    variants = yaml.safe_load(sweep.read_text())["variants"]
    variants["s5-adapted"] = {"max_seq_length": 2048, "model": str(adapted)}
    sweep.write_text(yaml.safe_dump({**yaml.safe_load(sweep.read_text()), "variants": variants}))
    commands = {run.variant: run.command for run in plan(sweep, folds=[0], seeds=[1])}
    assert commands["s5-adapted"].count("--model") == 1
    assert commands["s5-adapted"][commands["s5-adapted"].index("--model") + 1] == str(adapted)
    assert commands["head-512"][commands["head-512"].index("--model") + 1] == str(tmp_path / "bert")


def test_missing_data_stops_the_sweep_once_before_its_first_run(tmp_path, monkeypatch, capsys):
    sweep = write_sweep(tmp_path)
    sweep.write_text(sweep.read_text().replace(f'"data_dir": "{tmp_path}"', f'"data_dir": "{tmp_path / "glue"}"'))
    monkeypatch.setattr("subprocess.run", lambda *args, **kwargs: pytest.fail("a run was launched"))
    assert main(["--config", str(sweep)]) == 2
    captured = capsys.readouterr()
    assert (captured.out, captured.err) == (
        "",
        f"tisa-hf sweep: Sweep file {sweep}: No RTE/train.tsv under {tmp_path / 'glue'}; --data-dir takes the GLUE "
        "folder or the task's.\n",
    )
    sweep.write_text(
        sweep.read_text().replace(f'"data_dir": "{tmp_path / "glue"}"', f'"data_dir": "{tmp_path / "no"}"')
    )
    assert main(["--config", str(sweep)]) == 2
    assert capsys.readouterr().err == (
        f"tisa-hf sweep: Sweep file {sweep}: data_dir {tmp_path / 'no'} does not exist; set data_dir in the sweep "
        "file's settings to a local copy (docs/fine-tuning.md says how to get one).\n"
    )


def test_glue_from_the_hub_out_of_reach_stops_the_sweep_once(tmp_path, monkeypatch, capsys):
    """The smoke sweep reads GLUE from the Hub, as every sweep without data_dir does."""
    monkeypatch.setattr("tisa_hf.common.hub_access.hub_reachable", lambda timeout=None: False)
    monkeypatch.chdir(tmp_path)
    assert "data_dir" not in yaml.safe_load((ROOT / "configs/sweeps/minilm-smoke.yaml").read_text())["settings"]
    assert main(["--config", str(ROOT / "configs/sweeps/minilm-smoke.yaml")]) == 2
    assert capsys.readouterr().err == (
        "tisa-hf sweep: The dataset nyu-mll/glue comes from the Hugging Face Hub, which is unreachable; set data_dir "
        "in the sweep file's settings to a local copy (docs/fine-tuning.md says how to get one) (or set "
        "HF_HUB_OFFLINE=1 to use a copy in the local datasets cache).\n"
    )


@pytest.mark.parametrize("sweep_file", sorted((ROOT / "configs" / "sweeps").glob("*.yaml")), ids=lambda path: path.stem)
def test_every_shipped_sweep_gives_each_run_arguments_its_command_accepts(sweep_file, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)  # relative output_dirs resolve to empty folders: every run is planned as new
    monkeypatch.setattr("tisa_hf.experiments.sweep.check_data", lambda *args: None)  # data: the tests above
    sweep = yaml.safe_load(sweep_file.read_text())
    for folder in sweep.get("requires") or {}:  # what its scripts make (adapted models), here as empty folders
        (tmp_path / folder).mkdir(parents=True)
    module, argument_types = COMMANDS[sweep.get("command", "glue")]
    runs = plan(sweep_file)
    assert runs and all(run.status == "new" for run in runs)
    for run in runs:
        flags = run.command[run.command.index(module) + 1 :]
        training = parse_arguments(argument_types, flags, prog="tisa-hf sweep")[2]
        assert training.seed == run.seed and training.output_dir == str(run.output_dir)
