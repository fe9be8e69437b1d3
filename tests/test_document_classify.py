"""`tisa-hf classify`: a tiny long-input run in `replace` mode at 4x the position table trains, saves, resumes and
reloads; requests that cannot work are one line before any training."""

import csv
import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
import yaml
from huggingface_hub import ModelCard
from safetensors.torch import load_file
from torch.utils.data import DataLoader
from transformers import AutoModelForSequenceClassification, AutoTokenizer, DataCollatorWithPadding

from tests.fixtures import WORDS, write_tiny_model
from tisa_hf.commands.classify import main
from tisa_hf.finetune import trainer
from tisa_hf.finetune.arguments import parse_arguments
from tisa_hf.finetune.classify.labels import LabelVocabulary
from tisa_hf.finetune.classify.metrics import document_metrics
from tisa_hf.finetune.classify.options import CLASSIFY_ARGUMENTS
from tisa_hf.finetune.classify.task import run
from tisa_hf.finetune.classify.truncation import Truncation, encode_documents
from tisa_hf.finetune.predictions import read_predictions
from tisa_hf.finetune.push import build_model_card

TABLE = 16  # the tiny model's position table; the runs read 4x as many tokens
LENGTH = 4 * TABLE


def document_rows(count: int, seed: int) -> list[dict[str, str]]:
    """Documents of 20 to 120 words; "true" when the last word is one of the first ten words (only head+tail
    or a long input sees it for the long ones)."""
    rng = random.Random(seed)
    rows = []
    for index in range(count):
        words = rng.choices(WORDS, k=rng.randint(20, 120))
        rows.append({"id": f"d{seed}-{index}", "text": " ".join(words), "label": str(words[-1] in WORDS[:10]).lower()})
    return rows


def write_csv(path: Path, rows: list[dict[str, str]], columns=("id", "text", "label")) -> Path:
    with path.open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=columns, extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)
    return path


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("classify")
    write_tiny_model(root / "bert", dropout=0.1, positions=TABLE)
    for split, count, seed in (("train", 32, 1), ("dev", 12, 2), ("test", 12, 3)):
        write_csv(root / f"{split}.csv", document_rows(count, seed))
    return root


def argv(workspace: Path, output_dir: Path, *extra: str) -> list[str]:
    return [
        *("--model", str(workspace / "bert"), "--output-dir", str(output_dir)),
        *("--train-file", str(workspace / "train.csv"), "--validation-file", str(workspace / "dev.csv")),
        *("--test-file", str(workspace / "test.csv"), "--max-seq-length", str(LENGTH)),
        *("--train-batch-size", "8", "--gradient-accumulation-steps", "2", "--eval-batch-size", "4"),
        *("--learning-rate", "1e-3", "--max-steps", "8", "--eval-steps", "2", "--load-best-model-at-end"),
        *("--no-tracking", "--logging-steps", "4", "--tisa.num_kernels", "2", "--tisa.mode", "replace"),
        *extra,
    ]


def run_classify(arguments: list[str]):
    return run(*parse_arguments(CLASSIFY_ARGUMENTS, arguments, prog="test"))


def reloaded_logits(run_dir: Path, path: Path, truncation: Truncation, batch_size: int = 4) -> np.ndarray:
    """Logits of the saved model with plain transformers, in the run's evaluation batches."""
    model = AutoModelForSequenceClassification.from_pretrained(run_dir).eval()
    tokenizer = AutoTokenizer.from_pretrained(run_dir)
    texts = [row["text"] for row in csv.DictReader(path.open(encoding="utf-8"))]
    encoded = encode_documents(texts, tokenizer, truncation)
    features = [
        {key: encoded[key][index] for key in encoded if key != "document_tokens"} for index in range(len(texts))
    ]
    batches = DataLoader(features, batch_size=batch_size, collate_fn=DataCollatorWithPadding(tokenizer))
    with torch.no_grad():
        return np.concatenate([model(**batch).logits.numpy() for batch in batches])


def test_replace_mode_beyond_the_table_trains_resumes_and_reloads(workspace, tmp_path, monkeypatch):
    common = ("--checkpoint-steps", "2", "--truncation", "head+tail", "--head-tokens", "16")
    full = tmp_path / "full"
    record = run_classify(argv(workspace, full, *common))

    killed = tmp_path / "killed"
    save = trainer.save_checkpoint

    def die_at_step_6(accelerator, output_dir, state):
        if state.step == 6:
            raise KeyboardInterrupt  # killed after step 6, before its checkpoint: it resumes from step 4
        save(accelerator, output_dir, state)

    monkeypatch.setattr(trainer, "save_checkpoint", die_at_step_6)
    with pytest.raises(KeyboardInterrupt):
        run_classify(argv(workspace, killed, *common))
    monkeypatch.setattr(trainer, "save_checkpoint", save)
    assert sorted(path.name for path in (killed / "checkpoints").glob("step-*")) == ["step-4"]
    torch.manual_seed(12345)  # the resumed run restores the random state of its checkpoint
    resumed = run_classify(argv(workspace, killed, *common, "--resume"))

    assert record["steps"] == resumed["steps"] == 8 and record["tisa"]["mode"] == "replace"
    assert resumed["history"] == record["history"] and resumed["metrics"] == record["metrics"]
    full_weights, resumed_weights = (load_file(str(folder / "model.safetensors")) for folder in (full, killed))
    assert all(torch.equal(full_weights[name], resumed_weights[name]) for name in full_weights)

    # The record: validation per evaluation, the saved model's test metrics, the data and what the cut did.
    saved = json.loads((full / "metrics.json").read_text())
    assert [entry["step"] for entry in saved["history"]] == [2, 4, 6, 8]
    assert set(saved["metrics"]) == {"validation", "test"}
    assert saved["best_step"] == max(saved["history"], key=lambda e: e["metrics"]["validation"]["f1"])["step"]
    documents = saved["documents"]
    assert documents["labels"] == ["false", "true"] and documents["positive"] == "true"
    assert documents["main_metric"] == "f1" and documents["data"].startswith(f"train: {workspace / 'train.csv'}")
    lengths = {row["id"]: len(row["text"].split()) for row in document_rows(12, 3)}
    assert documents["truncation"]["test"] == {
        "documents": 12,
        "truncated": sum(length > LENGTH - 2 for length in lengths.values()),
        "longest": max(lengths.values()),
    }

    # The saved model reloads with plain transformers and gives the logits the run recorded, which give its metrics.
    predictions = read_predictions(full)
    test_ids = tuple(f"{workspace / 'test.csv'}:{line}" for line in range(2, 14))  # a file's documents: file:line
    assert predictions.step == saved["best_step"] and predictions.splits["test"].ids == test_ids
    truncation = Truncation("head+tail", LENGTH, 16)
    labels = LabelVocabulary(("false", "true"), "true")
    for split, file in (("validation", "dev.csv"), ("test", "test.csv")):
        logits = reloaded_logits(full, workspace / file, truncation)
        np.testing.assert_array_equal(logits, predictions.splits[split].logits)
        assert document_metrics(logits, predictions.splits[split].labels, labels) == saved["metrics"][split]
    config = AutoModelForSequenceClassification.from_pretrained(full).config
    assert config.id2label == {0: "false", 1: "true"} and config.max_position_embeddings == TABLE

    # `tisa-hf push` reads the record: the card carries every split's metrics.
    card = ModelCard(build_model_card(full, repo_id="someone/tiny-documents").content)
    results = {(result.dataset_split, result.metric_type): result.metric_value for result in card.data.eval_results}
    assert results == {
        (split, name): value for split, scores in saved["metrics"].items() for name, value in scores.items()
    }
    assert (
        "| test | f1 |" in card.text and "Task: documents, classes false, true (F1 of true); data: train:" in card.text
    )


def test_position_interpolation_saves_a_model_that_reads_the_length(workspace, tmp_path):
    out = tmp_path / "interp"
    flags = argv(workspace, out, "--max-steps", "2")
    run_classify([*flags[: flags.index("--tisa.num_kernels")], "--position-interpolation"])  # a plain model
    model = AutoModelForSequenceClassification.from_pretrained(out)
    assert model.config.max_position_embeddings == LENGTH
    table = model.bert.embeddings.position_embeddings.weight
    original = load_file(str(workspace / "bert" / "model.safetensors"))
    stretched = [name for name in original if name.endswith("position_embeddings.weight")]
    assert table.shape == (LENGTH, 32) and len(stretched) == 1 and original[stretched[0]].shape == (TABLE, 32)
    logits = reloaded_logits(out, workspace / "test.csv", Truncation("head", LENGTH))
    np.testing.assert_array_equal(logits, read_predictions(out).splits["test"].logits)


def test_config_overrides_reach_the_trained_model_and_its_record(workspace, tmp_path):
    out = tmp_path / "overrides"
    overrides = "attention_probs_dropout_prob=0,hidden_dropout_prob=0.25"
    run_classify(argv(workspace, out, "--max-steps", "2", "--config-overrides", overrides))
    config = AutoModelForSequenceClassification.from_pretrained(out).config
    assert (config.attention_probs_dropout_prob, config.hidden_dropout_prob) == (0.0, 0.25)
    assert yaml.safe_load((out / "run_config.yaml").read_text())["config_overrides"] == overrides


@pytest.mark.parametrize(
    ("overrides", "message"),
    [
        (
            "attention_probs_dropout_prob",
            "--config-overrides takes key=value pairs separated by commas "
            "('attention_probs_dropout_prob=0,hidden_dropout_prob=0.2'); got 'attention_probs_dropout_prob'.",
        ),
        (
            "attention_dropout=0",
            "--config-overrides: BertConfig ({model}) has no setting 'attention_dropout'; "
            "its settings are in {model}'s config.json.",
        ),
        (
            "num_hidden_layers=two",
            "--config-overrides: num_hidden_layers=two does not fit the type of num_hidden_layers (now 2).",
        ),
    ],
    ids=["no value", "unknown key", "wrong type"],
)
def test_config_overrides_that_cannot_apply_are_refused_before_training(
    overrides, message, workspace, tmp_path, capsys
):
    out = tmp_path / "run"
    assert main(argv(workspace, out, "--config-overrides", overrides)) == 2
    model = workspace / "bert"
    assert capsys.readouterr().err == f"tisa-hf classify: {message.format(model=model)}\n"
    assert not out.exists()


def test_add_mode_beyond_the_table_is_refused_before_training(workspace, tmp_path, capsys):
    out = tmp_path / "add"
    assert main(argv(workspace, out, "--tisa.mode", "add")) == 2
    assert capsys.readouterr().err == (
        f"tisa-hf classify: --max-seq-length {LENGTH} exceeds the position table of {workspace / 'bert'}, {TABLE} "
        f"positions (TISA mode='add' keeps it); use --tisa.mode replace, which reads any length, or "
        f"--max-seq-length {TABLE} or less.\n"
    )
    assert not out.exists()


def test_interpolation_of_a_tisa_model_is_refused(workspace, tmp_path, capsys):
    assert main(argv(workspace, tmp_path / "x", "--position-interpolation")) == 2
    assert capsys.readouterr().err == (
        f"tisa-hf classify: --position-interpolation stretches the position table of a plain model; "
        f"{workspace / 'bert'} is given TISA by --tisa.*. Leave out one of them.\n"
    )


def test_a_missing_label_column_is_refused_before_training(workspace, tmp_path, capsys):
    train = write_csv(tmp_path / "train.csv", document_rows(4, 1), columns=("id", "text"))
    out = tmp_path / "run"
    assert main([*argv(workspace, out), "--train-file", str(train)]) == 2
    assert capsys.readouterr().err == (
        f"tisa-hf classify: {train}:2: no column 'label' (--label-column); the columns are id, text.\n"
    )
    assert not out.exists()


def write_hyperpartisan(folder: Path, folds: int) -> Path:
    """A Hyperpartisan-layout folder: 12 articles, their labels, and splits.json with `folds` folds."""
    folder.mkdir()
    rows = document_rows(12, 4)
    articles = "".join(f'<article id="{row["id"]}" title="t"><p>{row["text"]}</p></article>' for row in rows)
    (folder / "articles-x.xml").write_text(f"<articles>{articles}</articles>", encoding="utf-8")
    labels = "".join(f'<article id="{row["id"]}" hyperpartisan="{row["label"]}"/>' for row in rows)
    (folder / "ground-truth-x.xml").write_text(f"<articles>{labels}</articles>", encoding="utf-8")
    ids = [row["id"] for row in rows]
    split = {"train": ids[:8], "dev": ids[8:10], "test": ids[10:]}
    (folder / "splits.json").write_text(json.dumps({"split": split, "folds": [ids[k::folds] for k in range(folds)]}))
    return folder


def test_a_fold_outside_the_splits_file_is_refused_before_training(workspace, tmp_path, capsys):
    corpus = write_hyperpartisan(tmp_path / "corpus", folds=3)
    out = tmp_path / "run"
    flags = argv(workspace, out)
    flags = flags[: flags.index("--train-file")] + flags[flags.index("--max-seq-length") :]
    assert main([*flags, "--data-dir", str(corpus), "--fold", "3"]) == 2
    assert capsys.readouterr().err == (
        f"tisa-hf classify: --fold 3: {corpus / 'splits.json'} has 3 folds, numbered 0 to 2.\n"
    )
    assert not out.exists()
