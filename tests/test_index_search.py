"""`tisa-hf index` and `tisa-hf search`: the index holds the multi-vector model's token vectors of every document in
fp16, built in parts and resumed; search's top-k equals a brute-force MaxSim with sentence-transformers' own
similarity; another model is refused, and bad input is one line before any model loads."""

from __future__ import annotations

import json
import random
import shutil
import string
from pathlib import Path

import numpy as np
import pytest
import torch
from embedding_fixtures import stop_after_the_first_part, tiny_tokenizer, write_tiny_encoder
from transformers import AutoModel

import tisa_hf
from tisa_hf.commands import cli

pytest.importorskip("sentence_transformers")
from sentence_transformers import MultiVectorEncoder  # noqa: E402

from tisa_hf.multivector import save_multi_vector_encoder  # noqa: E402
from tisa_hf.multivector.index_folder import StoredVectors, finished_index, model_fingerprint  # noqa: E402

index, search = cli.entry("index"), cli.entry("search")
_words = random.Random(0)
TEXTS = [
    " ".join("".join(_words.choices(string.ascii_lowercase, k=_words.randint(2, 6))) for _ in range(words))
    for words in (250, 12, 40, 5, 80, 30, 9)
]
QUESTIONS = [TEXTS[2].split()[3] + " " + TEXTS[2].split()[7], "the sky is blue", TEXTS[0].split()[100]]


def multi_vector_folder(root, seed: int):
    plain = write_tiny_encoder(root / f"plain-{seed}", positions=32, seed=seed)
    tisa = tisa_hf.TisaConfig(num_kernels=2, mode="replace", init="random")
    AutoModel.from_pretrained(plain, tisa=tisa).save_pretrained(root / f"tisa-{seed}")
    tiny_tokenizer().save_pretrained(root / f"tisa-{seed}")
    return save_multi_vector_encoder(root / f"tisa-{seed}", root / f"multi-{seed}")


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    """Two multi-vector models of the tiny BERT, other weights."""
    root = tmp_path_factory.mktemp("multi")
    return str(multi_vector_folder(root, 0)), str(multi_vector_folder(root, 1))


@pytest.fixture()
def corpus_file(tmp_path):
    path = tmp_path / "corpus.jsonl"
    path.write_text("".join(json.dumps({"id": i, "body": text}) + "\n" for i, text in enumerate(TEXTS)))
    return path


def index_argv(model, corpus_path, out, *extra):
    return [model, "--input", str(corpus_path), "--text-field", "body", "--out", str(out), "--part-size", "3", *extra]


def stored_documents(out) -> list[np.ndarray]:
    record = json.loads((out / "index.json").read_text())
    offsets = np.load(out / "offsets.npy")
    rows = np.concatenate([np.load(out / "shards" / f"{part:05d}.npy") for part in range(record["parts"])])
    return [rows[start:end] for start, end in zip(offsets[:-1], offsets[1:], strict=True)]


def test_an_index_holds_every_documents_token_vectors_and_resumes_at_its_next_part(
    models, corpus_file, tmp_path, monkeypatch, capsys
):
    model, _ = models
    stop_after_the_first_part(monkeypatch)
    assert index(index_argv(model, corpus_file, tmp_path / "index")) == 130  # Ctrl-C: one line, no traceback
    assert capsys.readouterr().err.splitlines() == [
        f"tisa-hf index: interrupted; kept 1 part (3 documents) in {tmp_path / 'index'}; the same command resumes "
        "from there."
    ]
    monkeypatch.undo()
    assert json.loads((tmp_path / "index" / "index.json").read_text())["parts"] == 1
    encoded = []
    original = MultiVectorEncoder.encode_document
    monkeypatch.setattr(
        MultiVectorEncoder,
        "encode_document",
        lambda self, inputs, **kw: encoded.extend(inputs) or original(self, inputs, **kw),
    )
    assert index(index_argv(model, corpus_file, tmp_path / "index")) == 0
    assert encoded == TEXTS[3:]  # the parts left

    record = json.loads((tmp_path / "index" / "index.json").read_text())
    lengths = [len(ids) - 2 for ids in tiny_tokenizer()(TEXTS)["input_ids"]]
    assert (record["parts"], record["documents"], record["vectors"]) == (3, 7, sum(lengths))
    assert (record["dimension"], record["bytes_per_token"], record["settings"]["dtype"]) == (32, 64, "float16")
    assert (record["document_length"], record["similarity"]) == (32_768, "meanmaxsim")
    assert record["settings"]["model_sha256"] == model_fingerprint(Path(model))
    stored = stored_documents(tmp_path / "index")
    assert [len(rows) for rows in stored] == lengths and lengths[0] > 512
    expected = MultiVectorEncoder(model, device="cpu").encode_document(TEXTS, batch_size=1)
    for rows, reference in zip(stored, expected, strict=True):
        assert rows.dtype == np.float16
        np.testing.assert_allclose(rows.astype(np.float32), reference.numpy(), rtol=0, atol=1e-3)


def test_search_top_k_equals_a_brute_force_maxsim(models, corpus_file, tmp_path, capsys):
    model, _ = models
    assert index(index_argv(model, corpus_file, tmp_path / "index")) == 0
    questions = tmp_path / "questions.jsonl"
    questions.write_text("".join(json.dumps({"question": question}) + "\n" for question in QUESTIONS))
    capsys.readouterr()
    argv = [str(tmp_path / "index"), "--queries", str(questions), "--query-field", "question", "--top-k", "4"]
    assert search([*argv, "--out", str(tmp_path / "hits.json")]) == 0
    found = json.loads((tmp_path / "hits.json").read_text())
    assert (
        capsys.readouterr().out
        == f"{4 * len(QUESTIONS)} hits of {len(QUESTIONS)} queries (top 4) written to {tmp_path / 'hits.json'}.\n"
    )

    encoder = MultiVectorEncoder(model, device="cpu")
    queries = encoder.encode_query(QUESTIONS)
    stored = [torch.from_numpy(rows.astype(np.float32)) for rows in stored_documents(tmp_path / "index")]
    brute_force = encoder.similarity(queries, stored).numpy()  # sentence-transformers' mean MaxSim, every document
    unrounded = encoder.similarity(queries, encoder.encode_document(TEXTS)).numpy()  # fp32 documents
    assert [result["query"] for result in found["results"]] == QUESTIONS
    for row, rounded, result in zip(brute_force, unrounded, found["results"], strict=True):
        hits = [hit["line"] - 1 for hit in result["hits"]]  # lines count from 1
        assert [hit["id"] for hit in result["hits"]] == hits  # the corpus' own ids: id i on line i + 1
        assert hits == np.argsort(-row, kind="stable")[:4].tolist()
        np.testing.assert_allclose([hit["score"] for hit in result["hits"]], row[hits], rtol=0, atol=1e-6)
        np.testing.assert_allclose(row, rounded, rtol=0, atol=2e-3)  # what storing fp16 moves

    assert search([str(tmp_path / "index"), "--query", QUESTIONS[1], "--top-k", "4"]) == 0
    (alone,) = json.loads(capsys.readouterr().out)["results"]  # encoded alone: no padding, the last bits differ
    in_file = found["results"][1]
    assert alone["query"] == in_file["query"]
    assert [hit["line"] for hit in alone["hits"]] == [hit["line"] for hit in in_file["hits"]]
    np.testing.assert_allclose(
        [hit["score"] for hit in alone["hits"]], [hit["score"] for hit in in_file["hits"]], rtol=0, atol=1e-6
    )


def test_bm25_candidates_recall_the_documents_sharing_the_querys_words_and_are_scored_exactly(
    models, corpus_file, tmp_path
):
    model, _ = models
    assert index(index_argv(model, corpus_file, tmp_path / "index")) == 0
    questions = tmp_path / "questions.txt"
    questions.write_text("".join(f"{question}\n" for question in QUESTIONS))

    def hits(*options):
        out = tmp_path / "hits.json"
        assert search([str(tmp_path / "index"), "--queries", str(questions), "--out", str(out), *options]) == 0
        return [
            [(hit["line"] - 1, hit["score"]) for hit in result["hits"]]
            for result in json.loads(out.read_text())["results"]
        ]

    every = hits("--top-k", "7")
    exact = [dict(found) for found in every]
    for top_k, candidates in (("3", "7"), ("2", "2")):
        found = hits("--top-k", top_k, "--candidates", candidates)
        for got, scores in zip(found, exact, strict=True):  # exact scores, to the last bits of a product
            np.testing.assert_allclose([score for _, score in got], [scores[d] for d, _ in got], rtol=0, atol=1e-6)
        if candidates == "7":  # every document a candidate: the exact search
            assert [[d for d, _ in got] for got in found] == [[d for d, _ in top[:3]] for top in every]
    assert 2 in dict(found[0]) and 0 in dict(found[2])  # two candidates recall the document of the query's words


def test_an_index_of_another_model_is_refused_in_one_line(models, corpus_file, tmp_path, capsys):
    model, other = models
    out = tmp_path / "index"
    assert index(index_argv(model, corpus_file, out)) == 0
    capsys.readouterr()
    assert index(index_argv(other, corpus_file, out)) == 2
    old, new = (Path(folder).resolve() for folder in (model, other))
    assert capsys.readouterr().err.splitlines() == [
        f"tisa-hf index: {out / 'index.json'} holds results of other input, model or settings (model {old} -> {new}; "
        f"model_sha256 {model_fingerprint(old)} -> {model_fingerprint(new)}); rerun with its settings to resume, "
        "or choose another --out, or pass --overwrite to start over."
    ]
    assert search([str(out), "--query", "blue", "--model", other]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"tisa-hf search: {other} is not the model {out / 'index.json'} was built with (its weights or settings "
        "differ); search with that model, or rebuild the index with this one."
    ]


@pytest.mark.parametrize(
    ("command", "arguments", "message"),
    [
        ("index", ["{model}", "--input", "{empty}", "--out", "{tmp}/index"], "--input {empty} holds no documents."),
        ("index", ["{tmp}", "--input", "{corpus}", "--out", "{tmp}/index"],
         "{tmp} is not a MultiVectorEncoder folder (no config_sentence_transformers.json saying so); write one with "
         "tisa-hf adapt --multi-vector or save_multi_vector_encoder."),
        ("index", ["{model}", "--input", "{numbers}", "--out", "{tmp}/index"],
         "{numbers}:2: the value under 'text' is a number, not a string; give each document's text as a JSON string."),
        ("index", ["{model}", "--input", "{tmp}", "--out", "{tmp}/index"],
         "--input {tmp} is a folder; give a JSON Lines file or a text file, one document a line."),
        ("index", ["{model}", "--input", "{twice}", "--out", "{tmp}/index"],
         "{twice}:2: id 'a' is line 1's too; give each document its own id."),
        ("index", ["{model}", "--input", "{twice}", "--id-field", "key", "--out", "{tmp}/index"],
         "{twice}:1: no id under 'key'; give every document one, or name the field with --id-field."),
        ("search", ["{tmp}/nothing", "--query", "blue"],
         "{tmp}/nothing holds no index (no index.json); build one with tisa-hf index."),
        ("search", ["{index}", "--queries", "{corpus}"],
         "{corpus}:1: no text under 'text'; name the field with --query-field."),
        ("search", ["{index}", "--query", " "], "--query is empty; give it some words."),
        ("search", ["{index}", "--query", "blue", "--candidates", "2", "--top-k", "3"],
         "--candidates 2 is fewer than --top-k 3; ask for at least as many candidates."),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_before_any_model_loads(
    models, corpus_file, tmp_path, capsys, monkeypatch, command, arguments, message
):
    model, _ = models
    if command == "search":
        assert index(index_argv(model, corpus_file, tmp_path / "built")) == 0
        capsys.readouterr()
    (tmp_path / "empty.txt").write_text("")
    (tmp_path / "numbers.jsonl").write_text('{"text": "one"}\n{"text": 42}\n')
    (tmp_path / "twice.jsonl").write_text('{"id": "a", "text": "one"}\n{"id": "a", "text": "two"}\n')

    def no_loading(*args, **kwargs):
        raise AssertionError("a model loaded")

    monkeypatch.setattr(MultiVectorEncoder, "__init__", no_loading)
    names = {"model": model, "empty": tmp_path / "empty.txt", "tmp": tmp_path, "corpus": corpus_file}
    names |= {"numbers": tmp_path / "numbers.jsonl", "twice": tmp_path / "twice.jsonl"}
    names["index"] = tmp_path / "built"
    assert cli.entry(command)([argument.format(**names) for argument in arguments]) == 2
    assert capsys.readouterr().err.splitlines() == [f"tisa-hf {command}: {message.format(**names)}"]


def test_an_index_built_on_two_processes_equals_one_built_in_this_process(models, corpus_file, tmp_path):
    model, _ = models
    assert index(index_argv(model, corpus_file, tmp_path / "one")) == 0
    assert index(index_argv(model, corpus_file, tmp_path / "two", "--devices", "cpu", "cpu")) == 0
    for one, two in zip(stored_documents(tmp_path / "one"), stored_documents(tmp_path / "two"), strict=True):
        np.testing.assert_allclose(one.astype(np.float32), two.astype(np.float32), rtol=0, atol=1e-3)


def test_an_int8_index_keeps_a_byte_a_number_and_a_scale_a_token_and_searches_over_what_it_keeps(
    models, corpus_file, tmp_path
):
    model, _ = models
    out = tmp_path / "index"
    assert index(index_argv(model, corpus_file, out, "--dtype", "int8")) == 0
    record = finished_index(str(out))
    assert (record["settings"]["dtype"], record["bytes_per_token"]) == ("int8", 32 + 4)
    assert np.load(out / "shards" / "00000.npy").dtype == np.int8
    stored = StoredVectors(str(out), record)
    encoder = MultiVectorEncoder(model, device="cpu")
    for document, reference in enumerate(encoder.encode_document(TEXTS)):
        rows = reference.numpy()
        half_a_level = np.abs(rows).max(axis=1, keepdims=True) / 127 / 2
        assert (np.abs(stored[document] - rows) <= half_a_level + 1e-7).all()
    hits = tmp_path / "hits.json"
    assert (
        search([str(out), "--queries", str(corpus_file), "--query-field", "body", "--top-k", "3", "--out", str(hits)])
        == 0
    )
    brute_force = encoder.similarity(
        encoder.encode_query(TEXTS), [torch.from_numpy(stored[d]) for d in range(len(stored))]
    ).numpy()
    for row, result in zip(brute_force, json.loads(hits.read_text())["results"], strict=True):
        assert [hit["line"] - 1 for hit in result["hits"]] == np.argsort(-row, kind="stable")[:3].tolist()


def test_hits_carry_the_corpus_own_ids_beside_their_lines(models, tmp_path, capsys):
    """A corpus whose objects have ids (under `id` by default, or --id-field) gets them back in search's hits,
    beside the 1-based line; one without ids gets lines alone."""
    model, _ = models
    keyed = tmp_path / "keyed.jsonl"
    keyed.write_text("".join(json.dumps({"key": f"doc-{i}", "body": text}) + "\n" for i, text in enumerate(TEXTS)))
    plain = tmp_path / "plain.txt"
    plain.write_text("".join(f"{text}\n" for text in TEXTS))
    assert index(index_argv(model, keyed, tmp_path / "keyed", "--id-field", "key")) == 0
    assert index([model, "--input", str(plain), "--out", str(tmp_path / "plain"), "--part-size", "3"]) == 0
    capsys.readouterr()
    found = {}
    for name in ("keyed", "plain"):
        assert search([str(tmp_path / name), "--query", QUESTIONS[0], "--top-k", "7"]) == 0
        (found[name],) = json.loads(capsys.readouterr().out)["results"]
    assert sorted(hit["line"] for hit in found["plain"]["hits"]) == list(range(1, 8))
    assert all(set(hit) == {"line", "score"} for hit in found["plain"]["hits"])
    assert [hit["id"] for hit in found["keyed"]["hits"]] == [f"doc-{hit['line'] - 1}" for hit in found["keyed"]["hits"]]
    assert [hit["line"] for hit in found["keyed"]["hits"]] == [hit["line"] for hit in found["plain"]["hits"]]


def test_search_after_the_model_folder_moved_names_the_folder_gone_and_model(models, corpus_file, tmp_path, capsys):
    model, _ = models
    copy = tmp_path / "model"
    shutil.copytree(model, copy)
    assert index(index_argv(str(copy), corpus_file, tmp_path / "index")) == 0
    copy.rename(tmp_path / "elsewhere")
    capsys.readouterr()
    assert search([str(tmp_path / "index"), "--query", "blue"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        f"tisa-hf search: {copy}, the model folder {tmp_path / 'index' / 'index.json'} names, is gone (moved or "
        "deleted); give where it is now with --model."
    ]
    assert search([str(tmp_path / "index"), "--query", "blue", "--model", str(tmp_path / "elsewhere")]) == 0


def test_index_help_names_every_way_a_token_vector_is_stored():
    from tisa_hf.multivector.options import index_parser

    assert index_parser().description == (
        "Turn a corpus into a token-vector index for tisa-hf search: one vector a token of each document (stored as "
        "--dtype says: float16, int8 or product-quantized), read by a multi-vector model, in parts saved as they "
        "finish (an interrupted run resumes), on one device or several processes."
    )
