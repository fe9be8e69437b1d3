import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from safetensors.torch import load_file
from transformers import AutoModelForSequenceClassification, AutoTokenizer

import tisa_hf
from tests.finetune_fixtures import write_rte_tsv, write_tiny_model
from tisa_hf.finetune import trainer
from tisa_hf.finetune.arguments import parse_arguments
from tisa_hf.finetune.glue import ARGUMENT_TYPES, main, run
from tisa_hf.finetune.glue_data import get_task, load_glue

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("glue")
    write_rte_tsv(root / "RTE")
    write_tiny_model(root / "bert")
    write_tiny_model(root / "bert-dropout", dropout=0.1)
    write_tiny_model(root / "albert", architecture="albert")
    return root


def glue_argv(workspace, output_dir, *extra):
    return [
        "--model", str(workspace / "bert"), "--data-dir", str(workspace), "--task", "rte",
        "--output-dir", str(output_dir), "--max-steps", "12", "--train-batch-size", "8", "--eval-batch-size", "8",
        "--learning-rate", "1e-3", "--warmup-steps", "2", "--eval-steps", "6", "--logging-steps", "3",
        "--max-seq-length", "32", "--no-tracking", *extra,
    ]  # fmt: skip


def run_glue(argv):
    return run(*parse_arguments(ARGUMENT_TYPES, argv, prog="test"))


def weights(folder):
    return load_file(str(Path(folder) / "model.safetensors"))


def dev_accuracy(model_dir, workspace):
    """Accuracy recomputed from the saved model with plain transformers, independent of the training loop."""
    model = AutoModelForSequenceClassification.from_pretrained(model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    dev = load_glue(get_task("rte"), data_dir=str(workspace))["validation"]
    pairs = (list(dev["sentence1"]), list(dev["sentence2"]))
    inputs = tokenizer(*pairs, truncation=True, max_length=32, padding=True, return_tensors="pt")
    with torch.no_grad():
        predictions = model(**inputs).logits.argmax(-1).numpy()
    return float(np.mean(predictions == np.array(dev["label"])))


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
    assert metrics["metrics"]["validation"]["accuracy"] == pytest.approx(dev_accuracy(output, workspace))
    assert yaml.safe_load((output / "run_config.yaml").read_text()) == metrics["config"]
    assert metrics["config"]["tisa_num_kernels"] == 2 and metrics["config"]["max_steps"] == 12
    reloaded = AutoModelForSequenceClassification.from_pretrained(output)
    assert tisa_hf.tisa_config_of(reloaded).num_kernels == 2
    assert not (output / "checkpoints").exists()  # removed once the run is complete
    assert list((output / "logs").rglob("events.out.tfevents.*"))  # TensorBoard is the default tracker


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
    settings = parse_arguments(ARGUMENT_TYPES, [], prog="test")[2]
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
    with pytest.raises(KeyboardInterrupt):
        run_glue(glue_argv(workspace, killed, *common))
    monkeypatch.setattr(trainer, "save_checkpoint", save)
    assert sorted(path.name for path in (killed / "checkpoints").iterdir()) == ["step-4"]
    torch.manual_seed(12345)  # the resumed run must restore the RNG, not inherit it
    run_glue(glue_argv(workspace, killed, *common, "--resume"))

    full_metrics = json.loads((full / "metrics.json").read_text())
    resumed_metrics = json.loads((killed / "metrics.json").read_text())
    assert resumed_metrics["history"] == full_metrics["history"]
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


def test_two_processes_match_one_with_the_same_global_batch(workspace, tmp_path):
    if torch.cuda.is_available():
        pytest.skip("this test runs its two processes on CPU")
    single, double = tmp_path / "single", tmp_path / "double"
    run_glue(glue_argv(workspace, single, "--tisa.num_kernels", "1"))
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no", "-m", "tisa_hf.glue",
        *glue_argv(workspace, double, "--tisa.num_kernels", "1"),
    ]  # fmt: skip
    # accelerate 1.x's `--cpu` starts a single process; `--multi_gpu` starts two (torchrun), which
    # ACCELERATE_USE_CPU puts on CPU with the gloo backend.
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "true"}
    completed = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
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
