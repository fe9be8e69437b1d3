"""`tisa-hf encode`: a corpus embedded in parts equals sentence-transformers' own `encode_document` of it, whether
in one process, several, or resumed after an interruption; bad input is one line before the model loads."""

import json

import numpy as np
import pytest
from embedding_fixtures import stop_after_the_first_part

from tisa_hf.commands import cli

pytest.importorskip("sentence_transformers")

encode = cli.entry("encode")  # `tisa-hf encode`
WORDS = ["the", "meeting", "went", "on", "about", "budgets", "and", "the", "design", "of", "the", "remote", "control"]


@pytest.fixture(scope="module")
def tisa_folder(minilm, tmp_path_factory):
    """A TISA replace-mode sentence-transformers folder (random kernels) that reads 96 tokens."""
    from tisa_hf.common.sentence_models import save_sentence_transformer, to_tisa_sentence_transformer

    model = to_tisa_sentence_transformer(
        minilm, {"num_kernels": 2, "mode": "replace", "init": "random"}, max_seq_length=96, device="cpu"
    )
    return str(save_sentence_transformer(model, tmp_path_factory.mktemp("tisa-st")))


@pytest.fixture()
def documents(tmp_path):
    """Five documents of 12 to 120 words as JSON Lines: two are longer than the model's 96 tokens."""
    texts = [" ".join(WORDS[j % len(WORDS)] for j in range(12 * (i + 1) + 6 * i * i)) for i in range(5)]
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"id": i, "body": text}) + "\n" for i, text in enumerate(texts)))
    return path, texts


def direct_embeddings(folder: str, texts: list[str]) -> np.ndarray:
    from sentence_transformers import SentenceTransformer

    model = SentenceTransformer(folder, device="cpu")
    return model.encode_document(texts, batch_size=1, convert_to_numpy=True)


def test_parts_equal_encode_document_and_count_the_cut_documents(tisa_folder, documents, tmp_path):
    path, texts = documents
    out = tmp_path / "out"
    argv = [tisa_folder, "--input", str(path), "--text-field", "body", "--out", str(out), "--part-size", "2"]
    assert encode([*argv, "--batch-size", "1"]) == 0
    got = np.load(out / "embeddings.npy")
    np.testing.assert_allclose(got, direct_embeddings(tisa_folder, texts), rtol=0, atol=1e-6)
    from transformers import AutoTokenizer

    lengths = [len(ids) for ids in AutoTokenizer.from_pretrained(tisa_folder)(texts, verbose=False)["input_ids"]]
    record = json.loads((out / "encode.json").read_text())
    assert (record["parts"], record["documents"], record["reads_tokens"]) == (3, 5, 96)
    assert record["documents_cut"] == sum(n > 96 for n in lengths) == 2
    assert record["tokens_read"] == sum(min(n, 96) for n in lengths)


def test_an_interrupted_run_resumes_at_its_next_part(tisa_folder, documents, tmp_path, monkeypatch, capsys):
    path, texts = documents
    argv = [tisa_folder, "--input", str(path), "--text-field", "body", "--part-size", "2", "--batch-size", "1"]
    stop_after_the_first_part(monkeypatch)
    assert encode([*argv, "--out", str(tmp_path / "out")]) == 130  # Ctrl-C: one line, what was kept
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"tisa-hf encode: interrupted; kept 1 part (2 documents) in {tmp_path / 'out'}; the same command resumes "
        "from there."
    )
    monkeypatch.undo()
    assert json.loads((tmp_path / "out" / "encode.json").read_text())["parts"] == 1
    assert not (tmp_path / "out" / "embeddings.npy").exists()

    embedded = []
    from sentence_transformers import SentenceTransformer

    original = SentenceTransformer.encode_document

    def counting(self, inputs, **kwargs):
        embedded.extend(inputs)
        return original(self, inputs, **kwargs)

    monkeypatch.setattr(SentenceTransformer, "encode_document", counting)
    assert encode([*argv, "--out", str(tmp_path / "out")]) == 0
    assert embedded == texts[2:]
    np.testing.assert_allclose(
        np.load(tmp_path / "out" / "embeddings.npy"), direct_embeddings(tisa_folder, texts), rtol=0, atol=1e-6
    )
    record = json.loads((tmp_path / "out" / "encode.json").read_text())
    assert (record["parts"], record["documents"]) == (3, 5)


def test_several_processes_give_the_one_process_result(tisa_folder, documents, tmp_path):
    """sentence-transformers' multi-process pool: the TISA model is pickled to two spawned CPU workers."""
    path, texts = documents
    argv = [tisa_folder, "--input", str(path), "--text-field", "body", "--batch-size", "1"]
    assert encode([*argv, "--out", str(tmp_path / "pool"), "--devices", "cpu", "cpu"]) == 0
    np.testing.assert_allclose(
        np.load(tmp_path / "pool" / "embeddings.npy"), direct_embeddings(tisa_folder, texts), rtol=0, atol=1e-6
    )


def test_another_setting_is_refused_and_overwrite_starts_over(tisa_folder, documents, tmp_path, capsys):
    path, _ = documents
    argv = [tisa_folder, "--input", str(path), "--text-field", "body", "--out", str(tmp_path / "out")]
    assert encode(argv) == 0
    assert encode([*argv, "--max-seq-length", "64"]) == 2
    assert capsys.readouterr().err.splitlines()[-1] == (
        f"tisa-hf encode: {tmp_path / 'out' / 'encode.json'} holds results of other input, model or settings "
        "(max_seq_length None -> 64); rerun with its settings to resume, or choose another --out, or pass "
        "--overwrite to start over."
    )
    assert encode([*argv, "--max-seq-length", "64", "--overwrite"]) == 0
    assert json.loads((tmp_path / "out" / "encode.json").read_text())["reads_tokens"] == 64


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ('{"body": "one"}\n\n{"body": "two"}\n', "{path}:2: a blank line; give one document a line, with no blank "
         "lines between."),
        ('{"text": "one"}\n', "{path}:1: no text under 'body'; name the field with --text-field."),
        ("not json\n", "{path}:1: not a JSON object (Expecting value); a .jsonl file holds one a line."),
    ],
)  # fmt: skip
def test_bad_input_is_one_line_before_the_model_loads(content, message, tmp_path, capsys):
    path = tmp_path / "docs.jsonl"
    path.write_text(content)
    argv = ["no-such-model", "--input", str(path), "--text-field", "body", "--out", str(tmp_path / "out")]
    assert encode(argv) == 2
    assert capsys.readouterr().err.splitlines() == [f"tisa-hf encode: {message.format(path=path)}"]


def test_a_plain_model_is_not_asked_past_its_table(minilm, tmp_path, capsys):
    path = tmp_path / "docs.txt"
    path.write_text("a first document\na second one\n")
    assert encode([minilm, "--input", str(path), "--out", str(tmp_path / "out"), "--max-seq-length", "1000"]) == 2
    assert capsys.readouterr().err.splitlines() == [
        "tisa-hf encode: max_seq_length 1000 is longer than the position table (512 positions) and the model has "
        "no TISA; ask for at most 512, or convert with TisaConfig(mode='replace'), which reads any length."
    ]


def test_each_part_logs_the_rate_and_the_time_left(tmp_path):
    """The line each finished part logs: documents done, the rate over the run, and the time left at that rate."""
    from tisa_hf.embeddings.encode import PartState

    state = PartState(tmp_path, {"input": "corpus.jsonl"}, overwrite=False)
    state.add_part(documents=40, tokens_read=20_000, documents_cut=0, wall_time_s=20.0)
    assert state.progress(1_000) == "40/1000 documents, 2.00 documents a second, 1000 tokens a second, 08:00 left"
