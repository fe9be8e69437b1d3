"""`tisa-hf squad` end to end on a generated SQuAD file and a tiny random BERT (nothing is downloaded)."""

import json
import random
from pathlib import Path

import pytest
import torch
import yaml
from safetensors.torch import load_file
from transformers import AutoModelForQuestionAnswering, AutoTokenizer

import tisa_hf
from tests.fixtures import WORDS, write_tiny_model
from tisa_hf.commands.squad import main
from tisa_hf.finetune.arguments import parse_arguments
from tisa_hf.finetune.squad.data import prepare_eval_features, read_squad_json
from tisa_hf.finetune.squad.metrics import postprocess_predictions, squad_v1_scores, squad_v2_scores
from tisa_hf.finetune.squad.options import SQUAD_ARGUMENTS

ROOT = Path(__file__).resolve().parents[1]
MAX_SEQ_LENGTH, DOC_STRIDE = 40, 16  # the tiny model has 64 positions; long contexts span several windows


def squad_document(questions: int, seed: int, with_impossible: bool) -> dict:
    """Official-format SQuAD: contexts of 10-60 words, each question naming its answer's preceding word; a third
    of the questions (v2 only) are unanswerable."""
    rng = random.Random(seed)
    paragraphs = []
    for p in range(questions // 2):
        words = [rng.choice(WORDS) for _ in range(rng.randint(10, 60))]
        context = " ".join(words)
        qas = []
        for q in range(2):
            qid = f"p{p}-q{q}"
            if with_impossible and rng.random() < 1 / 3:
                qas.append({"id": qid, "question": "w0 w1 none", "answers": [], "is_impossible": True})
                continue
            first = rng.randrange(1, len(words) - 3)
            length = rng.randint(1, 3)
            start = len(" ".join(words[:first])) + 1
            text = " ".join(words[first : first + length])
            assert context[start : start + len(text)] == text
            answers = [{"text": text, "answer_start": start}]
            qas.append({"id": qid, "question": f"after {words[first - 1]}", "answers": answers, "is_impossible": False})
        paragraphs.append({"context": context, "qas": qas})
    return {"version": "v2.0" if with_impossible else "1.1", "data": [{"title": "generated", "paragraphs": paragraphs}]}


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("squad")
    write_tiny_model(root / "bert")
    for version, with_impossible in (("v1", False), ("v2", True)):
        for split, questions, seed in (("train", 32, 0), ("dev", 12, 1)):
            document = squad_document(questions, seed, with_impossible)
            (root / f"{version}-{split}.json").write_text(json.dumps(document))
    return root


def squad_argv(workspace, version, output_dir, *extra):
    return [
        "--config", str(ROOT / "configs" / "squad" / f"{version}.yaml"), "--model", str(workspace / "bert"),
        "--train-file", str(workspace / f"{version}-train.json"),
        "--validation-file", str(workspace / f"{version}-dev.json"), "--output-dir", str(output_dir),
        "--max-steps", "8", "--warmup-steps", "1", "--train-batch-size", "8", "--eval-batch-size", "4",
        "--learning-rate", "1e-3", "--max-seq-length", str(MAX_SEQ_LENGTH), "--doc-stride", str(DOC_STRIDE),
        "--no-tracking", *extra,
    ]  # fmt: skip


def recomputed_scores(model_dir, dev_file, version_2):
    """Scores from the saved model, one forward pass over all dev features, and squad_metrics directly: no
    training loop, data loader or gathering involved."""
    model = AutoModelForQuestionAnswering.from_pretrained(model_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    examples = read_squad_json(dev_file)
    features = examples.map(
        prepare_eval_features,
        batched=True,
        remove_columns=examples.column_names,
        fn_kwargs={"tokenizer": tokenizer, "max_seq_length": MAX_SEQ_LENGTH, "doc_stride": DOC_STRIDE},
    )
    inputs = {name: torch.tensor(features[name]) for name in ("input_ids", "token_type_ids", "attention_mask")}
    with torch.no_grad():
        outputs = model(**inputs)
    spans, diffs = postprocess_predictions(
        examples.to_list(), features.to_list(), outputs.start_logits.numpy(), outputs.end_logits.numpy()
    )
    gold = {row["id"]: row["answers"]["text"] for row in examples}
    return (squad_v2_scores(gold, spans, diffs) if version_2 else squad_v1_scores(gold, spans)), len(features)


def test_v2_run_scores_match_a_recomputation_from_the_saved_model(workspace, tmp_path):
    output = tmp_path / "run"
    assert main(squad_argv(workspace, "v2", output, "--eval-steps", "4")) == 0
    result = json.loads((output / "metrics.json").read_text())
    assert result["task"] == "squad_v2" and result["tisa"] is None and result["steps"] == 8
    assert [entry["step"] for entry in result["history"]] == [4, 8]
    scores = result["metrics"]["validation"]
    dev = json.loads((workspace / "v2-dev.json").read_text())
    answerable = [qa["is_impossible"] for p in dev["data"][0]["paragraphs"] for qa in p["qas"]].count(False)
    assert (scores["total"], scores["HasAns_total"], scores["NoAns_total"]) == (12, answerable, 12 - answerable)
    assert 0 < answerable < 12
    for name in ("exact", "f1", "HasAns_exact", "HasAns_f1", "NoAns_exact", "NoAns_f1", "best_exact", "best_f1"):
        assert 0.0 <= scores[name] <= 100.0
    assert scores["best_f1"] >= scores["f1"] and scores["best_exact"] >= scores["exact"]
    assert scores["exact"] <= scores["f1"]

    expected, feature_count = recomputed_scores(output, workspace / "v2-dev.json", version_2=True)
    assert feature_count > 12  # long contexts overflow into several windows, so the feature order matters
    assert scores == pytest.approx(expected, abs=1e-4)

    config = yaml.safe_load((output / "run_config.yaml").read_text())
    assert config == result["config"]
    assert config["version_2_with_negative"] is True  # from configs/squad/v2.yaml
    assert config["n_best_size"] == 20 and config["max_steps"] == 8 and config["max_seq_length"] == MAX_SEQ_LENGTH
    assert not (output / "checkpoints").exists()


def test_tisa_run_saves_and_reloads_its_kernels(workspace, tmp_path):
    output = tmp_path / "tisa"
    tisa = ("--tisa.num_kernels", "2", "--tisa.mode", "add", "--tisa.init", "zeros")
    assert main(squad_argv(workspace, "v2", output, *tisa)) == 0
    result = json.loads((output / "metrics.json").read_text())
    assert result["tisa"] == tisa_hf.TisaConfig(num_kernels=2, mode="add", init="zeros").to_dict()

    reloaded = AutoModelForQuestionAnswering.from_pretrained(output)
    assert tisa_hf.tisa_config_of(reloaded) == tisa_hf.TisaConfig(num_kernels=2, mode="add", init="zeros")
    saved = load_file(str(output / "model.safetensors"))
    kernels = reloaded.base_model.tisa
    assert tuple(kernels.amplitude.shape) == (2, 4, 2)
    assert torch.equal(kernels.amplitude.detach(), saved["bert.tisa.amplitude"])
    assert kernels.amplitude.abs().max() > 0  # trained away from their zero start
    expected, _ = recomputed_scores(output, workspace / "v2-dev.json", version_2=True)
    assert result["metrics"]["validation"] == pytest.approx(expected, abs=1e-4)


def test_v1_run_reports_exact_match_and_f1(workspace, tmp_path):
    output = tmp_path / "v1"
    assert main(squad_argv(workspace, "v1", output, "--max-steps", "4")) == 0
    result = json.loads((output / "metrics.json").read_text())
    assert result["task"] == "squad"
    scores = result["metrics"]["validation"]
    assert set(scores) == {"exact_match", "f1"}
    assert 0.0 <= scores["exact_match"] <= scores["f1"] <= 100.0
    expected, _ = recomputed_scores(output, workspace / "v1-dev.json", version_2=False)
    assert scores == pytest.approx(expected, abs=1e-4)


def test_best_f1_model_is_the_run_model(workspace, tmp_path, monkeypatch):
    monkeypatch.setenv("ACCELERATE_USE_CPU", "true")
    output = tmp_path / "best"
    argv = squad_argv(
        workspace, "v1", output, "--eval-steps", "2", "--load-best-model-at-end", "--learning-rate", "3e-3"
    )
    assert main(argv) == 0
    result = json.loads((output / "metrics.json").read_text())
    f1 = [entry["metrics"]["validation"]["f1"] for entry in result["history"]]
    assert [entry["step"] for entry in result["history"]] == [2, 4, 6, 8]
    best = f1.index(max(f1))  # the first of equal scores
    assert result["best_step"] == 2 * (best + 1) < 8  # not the last model (CPU numbers)
    assert result["metrics"] == result["history"][best]["metrics"]
    expected, _ = recomputed_scores(output, workspace / "v1-dev.json", version_2=False)
    assert result["metrics"]["validation"] == pytest.approx(expected, abs=1e-4)


@pytest.mark.parametrize(("version", "learning_rate", "max_steps"), [("v1", 5e-5, 3649), ("v2", 3e-5, 8144)])
def test_configs_parse_with_the_squad_settings(version, learning_rate, max_steps):
    config = str(ROOT / "configs" / "squad" / f"{version}.yaml")
    model, tisa, training, squad = parse_arguments(SQUAD_ARGUMENTS, ["--config", config], prog="test")
    assert model.model == "albert/albert-base-v2" and tisa.tisa_config() is None
    assert (training.learning_rate, training.train_batch_size, training.max_steps) == (learning_rate, 48, max_steps)
    assert squad.version_2_with_negative is (version == "v2")
    assert (squad.max_seq_length, squad.doc_stride, squad.n_best_size, squad.max_answer_length) == (384, 128, 20, 30)


def test_bad_data_file_is_reported_with_its_path(workspace, tmp_path, capsys):
    broken = tmp_path / "dev.json"
    broken.write_text('{"data": [{"paragraphs": [{"qas": []}]}]}')
    argv = squad_argv(workspace, "v2", tmp_path / "run")
    argv[argv.index("--validation-file") + 1] = str(broken)
    assert main(argv) == 2
    assert f'tisa-hf squad: {broken}: data[0].paragraphs[0] has no "context"' in capsys.readouterr().err
