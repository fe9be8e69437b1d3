"""Every command that takes a model answers one line, before any model loads, for a folder that does not exist, a
model folder without a tokenizer (what `save_pretrained` writes for a model alone, as the README's first example
does), and a Hub name while the Hub is out of reach (offline mode, or no answer from its endpoint)."""

from __future__ import annotations

import json
from pathlib import Path

import huggingface_hub
import pytest
from transformers import BertConfig, BertModel, PreTrainedModel

from tisa_hf.commands import cli
from tisa_hf.commands.registry import COMMANDS
from tisa_hf.common import hub_access

ROOT = Path(__file__).resolve().parents[1]
# Each command's line with a model in it ({model}), its other files given so that only the model can be wrong.
COMMAND_LINES = {
    "encode": ["encode", "{model}", "--input", "{tmp}/corpus.jsonl", "--out", "{tmp}/run"],
    "index": ["index", "{model}", "--input", "{tmp}/corpus.jsonl", "--out", "{tmp}/run"],
    "search": ["search", "{tmp}/index", "--query", "blue", "--model", "{model}"],
    "sts": ["sts", "{model}", "--data", "{tmp}/sts.tsv", "--out", "{tmp}/run"],
    "longembed": ["longembed", "{model}", "--text", "{tmp}/text.txt", "--out", "{tmp}/run"],
    "spans": ["spans", "{model}", "--data", "{tmp}/text.txt", "--out", "{tmp}/run"],
    "context-passages": ["context-passages", "{model}", "--data", "{tmp}/text.txt", "--out", "{tmp}/run"],
    "qmsum": ["qmsum", "{model}", "--data", "{tmp}/qmsum", "--out", "{tmp}/run"],
    "qmsum-passages": ["qmsum-passages", "{model}", "--data", "{tmp}/qmsum", "--out", "{tmp}/run"],
    "context-train": ["context-train", "--model", "{model}", "--train-text", "{tmp}/text.txt", "--out", "{tmp}/run"],
    "demo": ["demo", "--model", "{model}", "--out", "{tmp}/run"],
    "glue": [
        "glue",
        "--config",
        "{root}/configs/glue/rte.yaml",
        "--model",
        "{model}",
        "--data-dir",
        "{tmp}",
        "--output-dir",
        "{tmp}/run",
    ],
    "squad": ["squad", "--model", "{model}", "--output-dir", "{tmp}/run"],
    "classify": ["classify", "--model", "{model}", "--data-dir", "{tmp}", "--output-dir", "{tmp}/run"],
    "adapt": ["adapt", "--model", "{model}", "--train-text", "{tmp}/text.txt", "--output-dir", "{tmp}/run"],
    "lm-eval": ["lm-eval", "{model}", "--text", "{tmp}/text.txt", "--lengths", "8", "--out", "{tmp}/run"],
    "analyze": ["analyze", "{model}", "--out", "{tmp}/run"],
    "compare": ["compare", "{model}", "--out", "{tmp}/run"],
    "bench": ["bench", "--sections", "long", "--long-model", "{model}"],
}
# The commands that read text with the model's own tokenizer (the others take it from elsewhere, or need none).
TOKENIZER_READERS = sorted(set(COMMAND_LINES) - {"index", "search", "lm-eval", "analyze", "compare", "bench"})
# The commands whose model is a MultiVectorEncoder folder (no Hub id).
FOLDER_ONLY = {"index", "search"}
HOW = {  # how each command names its model in its lines
    **dict.fromkeys(["encode", "analyze", "compare", "lm-eval"], "model {model}"),
    **dict.fromkeys(
        ["sts", "longembed", "spans", "context-passages", "qmsum", "qmsum-passages"], "{model}: model {model}"
    ),
    **dict.fromkeys(["context-train", "demo", "glue", "squad", "classify", "adapt"], "--model {model}"),
    "bench": "--long-model {model}",
}


def remedy(command: str) -> str:
    option = "" if HOW[command].startswith(("model", "{model}")) else HOW[command].split()[0] + " "
    return f"use {option}minilm (the packaged all-MiniLM-L6-v2) or a local model folder."


def test_every_command_that_takes_a_model_is_checked_here():
    """Every command but those over finished runs (sweep, report, push) and the machine (env) takes a model."""
    assert set(COMMAND_LINES) == set(COMMANDS) - {"sweep", "report", "push", "env"}


@pytest.fixture
def files(tmp_path, monkeypatch):
    """The other files each command line names, and any model load failing the test."""
    (tmp_path / "corpus.jsonl").write_text('{"text": "one document"}\n{"text": "another"}\n')
    (tmp_path / "text.txt").write_text(" = Title = \n\n" + " Some words of an article ." * 60 + "\n")
    for split in ("train", "val"):
        (tmp_path / "qmsum" / split).mkdir(parents=True)
        meeting = {
            "meeting_transcripts": [{"speaker": "A", "content": "Some words of a meeting ."}],
            "general_query_list": [{"query": "What was said?", "answer": "Some words."}],
            "specific_query_list": [],
        }
        (tmp_path / "qmsum" / split / "meeting.json").write_text(json.dumps(meeting))
    (tmp_path / "index").mkdir()  # a finished index, as far as search's checks read it
    (tmp_path / "index" / "index.json").write_text('{"settings": {"model": "moved", "token_centroids": null}}')
    (tmp_path / "index" / "offsets.npy").write_bytes(b"")
    (tmp_path / "sts.tsv").write_text("sentence1\tsentence2\tscore\na cat\ta dog\t2.0\n")

    def refuse(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(PreTrainedModel, "from_pretrained", classmethod(refuse))
    return tmp_path


def answer(command: str, model: str, tmp, capsys) -> list[str]:
    argv = [argument.format(model=model, tmp=tmp, root=ROOT) for argument in COMMAND_LINES[command]]
    assert cli.main(argv) == 2
    return capsys.readouterr().err.splitlines()


@pytest.mark.parametrize("command", sorted(COMMAND_LINES))
def test_a_folder_that_does_not_exist(command, files, capsys):
    model = str(files / "no-such-folder")
    line = (
        f"{model} does not exist; give a MultiVectorEncoder folder: write one with tisa-hf adapt --multi-vector or "
        "save_multi_vector_encoder."
        if command in FOLDER_ONLY
        else f"{HOW[command].format(model=model)}: no such folder, and not a Hub model id either; {remedy(command)}"
    )
    assert answer(command, model, files, capsys) == [f"tisa-hf {command}: {line}"]


@pytest.mark.parametrize("command", TOKENIZER_READERS)
def test_a_model_folder_without_a_tokenizer(command, files, capsys):
    model = files / "out"
    BertModel(
        BertConfig(hidden_size=8, num_hidden_layers=1, num_attention_heads=2, intermediate_size=8)
    ).save_pretrained(model)
    named = HOW[command].format(model=model)
    assert answer(command, str(model), files, capsys) == [
        f"tisa-hf {command}: {named} is a model folder without a tokenizer (none of tokenizer_config.json, "
        "tokenizer.json, vocab.txt, vocab.json, spiece.model, sentencepiece.bpe.model), as save_pretrained writes a "
        f"model alone; save the tokenizer it was trained with into it (tokenizer.save_pretrained('{model}')), or "
        f"{remedy(command)}"
    ]


@pytest.mark.parametrize("offline", [True, False], ids=["HF_HUB_OFFLINE", "no answer"])
@pytest.mark.parametrize("command", sorted(set(COMMAND_LINES) - FOLDER_ONLY))
def test_a_hub_name_while_the_hub_is_out_of_reach(command, offline, files, capsys, monkeypatch):
    """Answered at once: offline mode asks nothing, and the endpoint's probe gets no answer (here, an endpoint
    that refuses, as a machine without network does)."""
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", offline)
    monkeypatch.setattr(hub_access, "hub_reachable", lambda timeout=None: False)
    named = HOW[command].format(model="someone/no-such-model")
    reason = "HF_HUB_OFFLINE is set" if offline else "the Hugging Face Hub is unreachable"
    assert answer(command, "someone/no-such-model", files, capsys) == [
        f"tisa-hf {command}: {named} is not a local folder and not in the local Hub cache, and {reason}, so it cannot "
        f"be downloaded; {remedy(command)}"
    ]


# Each command whose data comes from the Hub unless a file is named: its line without that option.
HUB_DATA = {
    "sts": (["sts", "minilm", "--out", "{tmp}/run"], "nyu-mll/glue", "pass --data with GLUE's STS-B dev.tsv"),
    "longembed": (
        ["longembed", "minilm", "--out", "{tmp}/run"],
        "Salesforce/wikitext",
        "pass --text with a local copy of WikiText-2 (docs/long-documents.md#the-data says how to get one)",
    ),
    "spans": (
        ["spans", "minilm", "--out", "{tmp}/run"],
        "Salesforce/wikitext",
        "pass --data with a local copy of WikiText-2 (docs/long-documents.md#the-data says how to get one)",
    ),
    "context-passages": (
        ["context-passages", "minilm", "--out", "{tmp}/run"],
        "Salesforce/wikitext",
        "pass --data with a local copy of WikiText-2 (docs/long-documents.md#the-data says how to get one)",
    ),
    "context-train": (
        ["context-train", "--model", "minilm", "--output-dir", "{tmp}/run"],
        "Salesforce/wikitext",
        "pass --train-text with a local copy of WikiText-2 (docs/long-documents.md#the-data says how to get one)",
    ),
}


@pytest.mark.parametrize("command", sorted(HUB_DATA))
def test_data_from_the_hub_out_of_reach_is_one_line_before_any_model_loads(command, files, capsys, monkeypatch):
    """No default reads a folder beside the project: without a file the data comes from the Hub, and a Hub out of
    reach is one line naming the option that takes a local copy."""
    monkeypatch.setattr(hub_access, "hub_reachable", lambda timeout=None: False)
    monkeypatch.setenv("HF_DATASETS_CACHE", str(files / "datasets-cache"))  # a cache that holds nothing yet
    monkeypatch.setattr("datasets.config.HF_DATASETS_CACHE", files / "datasets-cache")
    argv, dataset, remedy = HUB_DATA[command]
    assert cli.main([argument.format(tmp=files) for argument in argv]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"tisa-hf {command}: The dataset {dataset} comes from the Hugging Face Hub, which is unreachable; {remedy} "
        "(or set HF_HUB_OFFLINE=1 to use a copy in the local datasets cache)."
    ]
