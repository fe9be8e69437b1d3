import json
import os
import subprocess
import time
from pathlib import Path

import accelerate
import numpy as np
import pytest
import torch
import yaml
from safetensors.torch import load_file
from transformers import AutoModelForSequenceClassification, AutoTokenizer

import tisa_hf
from tests.fixtures import (
    glue_argv,
    network_namespaces_available,
    two_machine_launch,
    two_process_launch,
    write_glue_tsv,
    write_rte_tsv,
    write_tiny_model,
)
from tisa_hf.commands.glue import main
from tisa_hf.common.machine import processor_name
from tisa_hf.finetune import trainer
from tisa_hf.finetune.arguments import parse_arguments
from tisa_hf.finetune.glue import task as glue
from tisa_hf.finetune.glue.data import load_glue
from tisa_hf.finetune.glue.metrics import glue_metrics
from tisa_hf.finetune.glue.options import GLUE_ARGUMENTS
from tisa_hf.finetune.glue.task import run
from tisa_hf.finetune.predictions import read_predictions
from tisa_hf.finetune.task_tables import get_task

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("glue")
    write_rte_tsv(root / "RTE")
    write_glue_tsv(root / "STS-B", "stsb")
    write_tiny_model(root / "bert")
    write_tiny_model(root / "bert-dropout", dropout=0.1)
    write_tiny_model(root / "albert", architecture="albert")
    return root


def run_glue(argv):
    return run(*parse_arguments(GLUE_ARGUMENTS, argv, prog="test"))


def weights(folder):
    return load_file(str(Path(folder) / "model.safetensors"))


def dev_logits(model_dir, workspace, task="rte"):
    """Dev logits and labels from the saved model with plain transformers, independent of the training loop."""
    model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    dev = load_glue(get_task(task), data_dir=str(workspace))["validation"]
    pairs = (list(dev["sentence1"]), list(dev["sentence2"]))
    inputs = tokenizer(*pairs, truncation=True, max_length=32, padding=True, return_tensors="pt")
    with torch.no_grad():
        return model(**inputs).logits.numpy(), np.array(dev["label"])


def dev_accuracy(model_dir, workspace):
    logits, labels = dev_logits(model_dir, workspace)
    return float(np.mean(logits.argmax(-1) == labels))


def test_run_writes_model_metrics_and_config(workspace, tmp_path):
    output = tmp_path / "run"
    argv = glue_argv(workspace, output, "--tisa.num_kernels", "2", "--tisa.init", "random", "--checkpoint-steps", "5")
    argv[argv.index("--no-tracking")] = "--no-tracking=false"
    assert main(argv) == 0
    metrics = json.loads((output / "metrics.json").read_text())
    assert [entry["step"] for entry in metrics["history"]] == [6, 12]
    assert metrics["metrics"] == metrics["history"][-1]["metrics"]
    assert metrics["tisa"] == tisa_hf.TisaConfig(num_kernels=2, init="random").to_dict()
    assert metrics["seed"] == 1 and metrics["steps"] == 12 and metrics["wall_time_s"] > 0
    assert set(metrics["versions"]) >= {"tisa_hf", "torch", "transformers", "accelerate", "datasets"}
    assert metrics["versions"]["accelerate"] == accelerate.__version__
    assert metrics["machine"] == {
        "device": "cpu",
        "gpu": None,
        "processor": processor_name(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
    }
    assert metrics["metrics"]["validation"]["accuracy"] == pytest.approx(dev_accuracy(output, workspace))
    assert metrics["best_step"] is None and metrics["steps_per_epoch"] == 8  # 64 examples in batches of 8
    predictions = read_predictions(output)  # plain JSON
    assert (predictions.task, predictions.step, list(predictions.splits)) == ("rte", 12, ["validation"])
    logits, labels = dev_logits(output, workspace)
    assert np.array_equal(predictions.splits["validation"].labels, labels)
    np.testing.assert_allclose(predictions.splits["validation"].logits, logits, atol=1e-5)
    split = predictions.splits["validation"]
    assert glue_metrics("rte", split.logits, split.labels) == metrics["metrics"]["validation"]
    assert yaml.safe_load((output / "run_config.yaml").read_text()) == metrics["config"]
    assert metrics["config"]["tisa_num_kernels"] == 2 and metrics["config"]["max_steps"] == 12
    reloaded = AutoModelForSequenceClassification.from_pretrained(output)
    assert tisa_hf.tisa_config_of(reloaded).num_kernels == 2
    assert not (output / "checkpoints").exists()  # removed once the run is complete
    assert list((output / "logs").rglob("events.out.tfevents.*"))  # TensorBoard is the default tracker


def without(argv, *options):
    """`argv` without the given options and their values."""
    out = list(argv)
    for option in options:
        index = out.index(option)
        del out[index : index + 2]
    return out


def test_epochs_and_warmup_ratio_set_the_schedule_and_the_progress_bar(workspace, tmp_path, monkeypatch):
    scheduled, bars = [], []
    original_scheduler, original_tqdm = trainer.get_scheduler, trainer.tqdm

    def recording_scheduler(name, optimizer, num_warmup_steps, num_training_steps):
        scheduled.append((num_warmup_steps, num_training_steps))
        return original_scheduler(
            name, optimizer, num_warmup_steps=num_warmup_steps, num_training_steps=num_training_steps
        )

    def recording_tqdm(*args, **kwargs):
        bars.append(kwargs["total"])
        return original_tqdm(*args, **kwargs)

    monkeypatch.setattr(trainer, "get_scheduler", recording_scheduler)
    monkeypatch.setattr(trainer, "tqdm", recording_tqdm)
    output = tmp_path / "epochs"
    argv = without(glue_argv(workspace, output), "--max-steps", "--warmup-steps")
    run_glue([*argv, "--num-train-epochs", "1.5", "--gradient-accumulation-steps", "2", "--warmup-ratio", "0.25"])
    # 64 examples in micro-batches of 4: 16 a epoch, 8 optimizer steps; 1.5 epochs = 12 steps, 3 of them warm-up.
    assert scheduled == [(3, 12)] and bars == [12]
    metrics = json.loads((output / "metrics.json").read_text())
    assert (metrics["steps"], metrics["steps_per_epoch"]) == (12, 8)
    assert (metrics["config"]["max_steps"], metrics["config"]["warmup_steps"]) == (12, 3)
    assert metrics["config"]["num_train_epochs"] == 1.5 and metrics["config"]["warmup_ratio"] == 0.25
    assert yaml.safe_load((output / "run_config.yaml").read_text()) == metrics["config"]


def test_tisa_learning_rate_is_its_own(workspace, tmp_path):
    tisa = ("--model", str(workspace / "albert"), "--tisa.num_kernels", "1", "--tisa.init", "zeros", "--max-steps", "3")
    run_glue(glue_argv(workspace, tmp_path / "frozen", *tisa, "--tisa.lr", "0"))
    run_glue(glue_argv(workspace, tmp_path / "shared", *tisa))
    initial = AutoModelForSequenceClassification.from_pretrained(
        workspace / "albert", num_labels=2, tisa=tisa_hf.TisaConfig(num_kernels=1, init="zeros")
    ).state_dict()
    frozen, shared = weights(tmp_path / "frozen"), weights(tmp_path / "shared")
    kernels = sorted(name for name in frozen if ".tisa." in name)
    assert kernels == ["albert.tisa.amplitude", "albert.tisa.center", "albert.tisa.sharpness"]
    assert all(torch.equal(frozen[name], initial[name]) for name in kernels)  # --tisa.lr 0: never moved
    assert not torch.equal(shared["albert.tisa.amplitude"], initial["albert.tisa.amplitude"])  # default: lr 1e-3
    embeddings = "albert.embeddings.word_embeddings.weight"
    assert not torch.equal(frozen[embeddings], initial[embeddings])  # the weights trained either way
    settings = parse_arguments(GLUE_ARGUMENTS, [], prog="test")[2]
    groups = trainer.parameter_groups(
        AutoModelForSequenceClassification.from_pretrained(tmp_path / "frozen"), settings, 0.5
    )
    assert [group.get("lr") for group in groups] == [None, None, 0.5]
    assert sorted(tuple(p.shape) for p in groups[-1]["params"]) == [(2, 4, 1)] * 3


def test_resume_after_a_kill_matches_an_uninterrupted_run(workspace, tmp_path, monkeypatch):
    common = ("--model", str(workspace / "bert-dropout"), "--checkpoint-steps", "4", "--tisa.num_kernels", "1")
    full = tmp_path / "full"
    run_glue(glue_argv(workspace, full, *common))

    killed = tmp_path / "killed"
    save = trainer.save_checkpoint

    def save_then_die_on_the_second(accelerator, output_dir, state):
        if state.step == 8:
            raise KeyboardInterrupt  # killed after step 8, before its checkpoint: steps 5-8 are lost
        save(accelerator, output_dir, state)

    monkeypatch.setattr(trainer, "save_checkpoint", save_then_die_on_the_second)
    started = time.perf_counter()
    with pytest.raises(KeyboardInterrupt):
        run_glue(glue_argv(workspace, killed, *common))
    monkeypatch.setattr(trainer, "save_checkpoint", save)
    assert sorted(path.name for path in (killed / "checkpoints").iterdir()) == ["step-4"]
    saved_state = killed / "checkpoints" / "step-4" / "trainer_state.json"
    state = json.loads(saved_state.read_text())
    assert 0 < state["wall_time_s"] < time.perf_counter() - started
    saved_state.write_text(json.dumps({**state, "wall_time_s": 1000.0}))  # as if the first process took 1000 s
    torch.manual_seed(12345)  # the resumed run must restore the RNG, not inherit it
    resumed_at = time.perf_counter()
    run_glue(glue_argv(workspace, killed, *common, "--resume"))
    resumed_for = time.perf_counter() - resumed_at

    full_metrics = json.loads((full / "metrics.json").read_text())
    resumed_metrics = json.loads((killed / "metrics.json").read_text())
    assert resumed_metrics["history"] == full_metrics["history"]
    assert 1000 < resumed_metrics["wall_time_s"] < 1000 + resumed_for  # the earlier process's time, to step 4
    full_weights, resumed_weights = weights(full), weights(killed)
    assert all(torch.equal(full_weights[name], resumed_weights[name]) for name in full_weights)
    # Dropout is on, so a run with another seed differs: the comparison above is not vacuous.
    run_glue(glue_argv(workspace, tmp_path / "other", *common, "--seed", "2"))
    assert not torch.equal(weights(tmp_path / "other")["classifier.weight"], full_weights["classifier.weight"])


def test_gradient_accumulation_matches_the_full_batch(workspace, tmp_path):
    run_glue(glue_argv(workspace, tmp_path / "one"))
    run_glue(glue_argv(workspace, tmp_path / "two", "--gradient-accumulation-steps", "2"))
    one, two = weights(tmp_path / "one"), weights(tmp_path / "two")
    assert all(torch.allclose(one[name], two[name], atol=1e-5) for name in one)


def test_uneven_batch_split_is_refused(workspace, tmp_path):
    with pytest.raises(ValueError, match="train_batch_size 8 must split evenly into 3 accumulation step"):
        run_glue(glue_argv(workspace, tmp_path / "x", "--gradient-accumulation-steps", "3"))


@pytest.fixture(scope="module")
def two_process_run(workspace, tmp_path_factory) -> Path:
    """The 12-step glue run as 2 CPU processes on one machine (`accelerate launch --num_processes 2`)."""
    if torch.cuda.is_available():
        pytest.skip("these tests run their processes on CPU")
    double = tmp_path_factory.mktemp("two-processes") / "run"
    command = [*two_process_launch("tisa_hf.commands.glue"), *glue_argv(workspace, double, "--tisa.num_kernels", "1")]
    # accelerate 1.x's `--cpu` starts a single process; `--multi_gpu` starts two (torchrun), which
    # ACCELERATE_USE_CPU puts on CPU with the gloo backend.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "true"}
    completed = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    return double


def test_two_processes_match_one_with_the_same_global_batch(workspace, tmp_path, two_process_run):
    single, double = tmp_path / "single", two_process_run
    run_glue(glue_argv(workspace, single, "--tisa.num_kernels", "1"))
    one = json.loads((single / "metrics.json").read_text())
    two = json.loads((double / "metrics.json").read_text())
    assert two["num_processes"] == 2 and one["num_processes"] == 1
    for entry_one, entry_two in zip(one["history"], two["history"], strict=True):
        assert entry_one["step"] == entry_two["step"]
        assert entry_two["metrics"]["validation"]["accuracy"] == pytest.approx(
            entry_one["metrics"]["validation"]["accuracy"]
        )
    weights_one, weights_two = weights(single), weights(double)
    assert all(torch.allclose(weights_one[name], weights_two[name], atol=1e-5) for name in weights_one)


def test_two_machines_end_with_the_weights_of_two_processes_on_one(workspace, tmp_path, two_process_run):
    """`accelerate launch --num_machines 2` (machine ranks 0 and 1, one process each, rendezvous on 127.0.0.1, gloo
    on CPU) trains to the same weights, bit for bit, as 2 processes on one machine: the same world, the same
    batches and the same all-reduce."""
    if not network_namespaces_available():
        if os.environ.get("CI"):
            pytest.fail("CI must be able to make a network namespace (unshare --net) for the two-machine run")
        pytest.skip("no network namespace for the two machines (unshare --net needs root or CAP_SYS_ADMIN)")
    two_machines = tmp_path / "two-machines"
    argv = glue_argv(workspace, two_machines, "--tisa.num_kernels", "1")
    completed = two_machine_launch("tisa_hf.commands.glue", argv, {"PYTHONPATH": str(ROOT)})
    assert completed.returncode == 0, completed.stdout[-3000:]
    assert json.loads((two_machines / "metrics.json").read_text())["num_processes"] == 2
    weights_one, weights_two = weights(two_process_run), weights(two_machines)
    assert weights_one.keys() == weights_two.keys()
    assert all(torch.equal(weights_one[name], weights_two[name]) for name in weights_one)


def stsb_argv(workspace, output_dir, learning_rate, *extra):
    """STS-B, whose dev Pearson moves from one evaluation to the next (RTE stays at the majority class here), with
    dropout on, so that a resumed run must restore the RNG."""
    argv = glue_argv(workspace, output_dir, "--task", "stsb", "--model", str(workspace / "bert-dropout"))
    return [*argv, "--learning-rate", learning_rate, "--eval-steps", "4", "--load-best-model-at-end", *extra]


class RecordingEvaluator(glue.GlueEvaluator):
    """Keeps every evaluation's metrics and logits (the last one is the re-evaluation of the best model)."""

    calls: list = []

    def __call__(self):
        metrics = super().__call__()
        RecordingEvaluator.calls.append((metrics, self.outputs["validation"].logits.copy()))
        return metrics


@pytest.fixture
def recording(monkeypatch):
    monkeypatch.setenv("ACCELERATE_USE_CPU", "true")  # the steps these tests expect are CPU numbers
    monkeypatch.setattr(glue, "GlueEvaluator", RecordingEvaluator)
    RecordingEvaluator.calls = []
    return RecordingEvaluator.calls


def test_best_model_is_the_run_model_and_its_predictions(workspace, tmp_path, recording):
    output = tmp_path / "best"
    run_glue(stsb_argv(workspace, output, "1e-2"))
    result = json.loads((output / "metrics.json").read_text())
    pearson = [entry["metrics"]["validation"]["pearson"] for entry in result["history"]]
    assert [entry["step"] for entry in result["history"]] == [4, 8, 12]
    assert result["best_step"] == 8 and pearson[1] == max(pearson)  # neither the first nor the last evaluation
    assert result["metrics"] == result["history"][1]["metrics"]
    (at_best_metrics, at_best_logits), (reloaded_metrics, reloaded_logits) = recording[1], recording[3]
    assert len(recording) == 4 and reloaded_metrics == at_best_metrics
    assert np.array_equal(reloaded_logits, at_best_logits)

    saved_logits, labels = dev_logits(output, workspace, "stsb")
    np.testing.assert_allclose(saved_logits, at_best_logits, atol=1e-5)
    assert not np.allclose(saved_logits, recording[2][1], atol=1e-3)  # the last step's model differs
    predictions = read_predictions(output)
    assert predictions.step == 8
    assert np.array_equal(predictions.splits["validation"].logits, at_best_logits)
    assert np.allclose(predictions.splits["validation"].labels, labels)
    assert not (output / "checkpoints").exists()


@pytest.mark.parametrize(
    ("learning_rate", "best_step", "on_disk_after_kill"),
    [
        # The best model (step 4) is that of the last checkpoint: the resumed process never evaluates it and must
        # take it from disk.
        ("3e-2", 4, ["best-step-4", "step-4"]),
        # A new best (step 8) after the last checkpoint (whose best is step 4) is lost with the kill and found again.
        ("1e-2", 8, ["best-step-4", "best-step-8", "step-4"]),
    ],
)
def test_best_model_survives_a_kill(
    workspace, tmp_path, monkeypatch, recording, learning_rate, best_step, on_disk_after_kill
):
    full, killed = tmp_path / "full", tmp_path / "killed"
    run_glue(stsb_argv(workspace, full, learning_rate, "--checkpoint-steps", "4"))
    save = trainer.save_checkpoint

    def die_before_the_second_checkpoint(accelerator, output_dir, state):
        if state.step == 8:
            raise KeyboardInterrupt
        save(accelerator, output_dir, state)

    monkeypatch.setattr(trainer, "save_checkpoint", die_before_the_second_checkpoint)
    with pytest.raises(KeyboardInterrupt):
        run_glue(stsb_argv(workspace, killed, learning_rate, "--checkpoint-steps", "4"))
    monkeypatch.setattr(trainer, "save_checkpoint", save)
    assert sorted(path.name for path in (killed / "checkpoints").iterdir()) == on_disk_after_kill
    recording.clear()
    run_glue(stsb_argv(workspace, killed, learning_rate, "--checkpoint-steps", "4", "--resume"))

    expected, resumed = (json.loads((folder / "metrics.json").read_text()) for folder in (full, killed))
    assert resumed["best_step"] == expected["best_step"] == best_step
    assert resumed["history"] == expected["history"] and resumed["metrics"] == expected["metrics"]
    full_weights, resumed_weights = weights(full), weights(killed)
    assert all(torch.equal(full_weights[name], resumed_weights[name]) for name in full_weights)
    assert read_predictions(killed).to_json() == read_predictions(full).to_json()
    assert [metrics for metrics, _ in recording][-1] == expected["metrics"]
