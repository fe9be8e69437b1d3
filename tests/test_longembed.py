"""`tisa-hf longembed`: the task builders, Acc@1, the systems' readings against direct computations, resuming,
paired intervals, and the one-line refusals before any model loads."""

from __future__ import annotations

import json
import random
import shutil

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from embedding_fixtures import parse_systems_then_options, record_loaded_systems, tiny_tokenizer, write_tiny_encoder
from transformers import AutoModel

from tests.fixtures import WORDS
from tisa_hf.common.hub_access import model_remedy
from tisa_hf.common.long_inputs import chunks_of
from tisa_hf.common.saved_files import TOKENIZER_FILES
from tisa_hf.common.text import tokenize_articles
from tisa_hf.config import TisaConfig
from tisa_hf.errors import UsageError

pytest.importorskip("sentence_transformers")
from tisa_hf.common.machine import machine  # noqa: E402
from tisa_hf.common.result_files import file_name, scores_path  # noqa: E402
from tisa_hf.embeddings.lexical import bm25_scores  # noqa: E402
from tisa_hf.embeddings.options import longembed_parser, qmsum_parser, sts_parser  # noqa: E402
from tisa_hf.embeddings.retrieval import longembed  # noqa: E402
from tisa_hf.embeddings.retrieval.longembed_data import build_task, text_haystack  # noqa: E402
from tisa_hf.embeddings.retrieval.needles import NAMES, needle_facts  # noqa: E402
from tisa_hf.embeddings.retrieval.ranking import answer_ranks, reciprocal_rank_fusion  # noqa: E402
from tisa_hf.embeddings.systems import Embedder, SystemSpec  # noqa: E402

TABLE = 32


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("longembed")
    write_tiny_encoder(root / "tiny", positions=TABLE)
    write_text(root / "text.txt")
    return root


def write_text(path, articles: int = 12, sentences: int = 12, seed: int = 0) -> None:
    """WikiText's layout (` = Title = ` lines, paragraphs of sentences ending in ` . `), random words."""
    rng = random.Random(seed)
    lines = []
    for _ in range(articles):
        lines += ["", f" = {rng.choice(WORDS)} = ", ""]
        sentence = lambda: " ".join(rng.choices(WORDS, k=rng.randint(4, 12))) + " ."  # noqa: E731
        lines += [" " + " ".join(sentence() for _ in range(sentences)) + " "]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def occurrences(sequence: list[int], part: list[int]) -> int:
    return sum(sequence[start : start + len(part)] == part for start in range(len(sequence) - len(part) + 1))


@pytest.mark.parametrize("task", ["passkey", "needle"])
def test_documents_are_exactly_long_and_every_query_has_one_right_document(workspace, task):
    tokenizer = tiny_tokenizer()
    stream = text_haystack(workspace / "text.txt", tokenizer)
    (period,) = tokenizer.convert_tokens_to_ids(["."])
    for length in (150, 400):
        built = build_task(task, length, tokenizer, documents=20, queries=10, seed=0, text_stream=stream)
        assert [len(document) for document in built.documents] == [length] * 20
        assert len(built.queries) == 10 and built.answers == list(range(10))
        hays = []
        for index, (document, needle) in enumerate(zip(built.documents, built.needles, strict=True)):
            assert document[0] == tokenizer.cls_token_id and document[-1] == tokenizer.sep_token_id
            assert [occurrences(other, needle) for other in built.documents] == [int(i == index) for i in range(20)]
            start = next(i for i in range(length) if document[i : i + len(needle)] == needle)
            assert document[start - 1] in (tokenizer.cls_token_id, period)  # at a sentence boundary
            hays.append(document[1:start] + document[start + len(needle) : -1])
        longest = max(hays, key=len)  # every document's hay is the start of one window: only the needle differs
        assert all(hay == longest[: len(hay)] for hay in hays) and len({len(hay) for hay in hays}) > 1
        for query, answer in zip(built.queries, built.answers, strict=True):
            named = [name for name in NAMES if name in query.split(" ") or f"{name}?" in query.split(" ")]
            assert len(named) == 1  # the query names one person, whose needle only its document holds
            holders = [i for i, needle in enumerate(built.needles) if named[0].lower() in tokenizer.decode(needle)]
            assert holders == [answer]
        again = build_task(task, length, tokenizer, documents=20, queries=10, seed=0, text_stream=stream)
        assert again.documents == built.documents


def direct(model, sequence: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return F.normalize(model(input_ids=torch.tensor([sequence])).last_hidden_state[0].mean(0), dim=-1)


def test_truncation_and_chunk_and_average_match_a_direct_computation(workspace):
    tokenizer = tiny_tokenizer()
    documents = build_task("passkey", 150, tokenizer, documents=4, queries=2, seed=1).documents
    model = AutoModel.from_pretrained(workspace / "tiny").eval()
    chunked = Embedder(SystemSpec.parse(f"chunk:{workspace / 'tiny'}"), 150, torch.device("cpu"), batch_tokens=256)
    expected = []
    for document in documents:
        body = document[1:-1]
        pieces = [[document[0], *body[start : start + TABLE - 2], document[-1]] for start in range(0, 148, TABLE - 2)]
        assert sum(len(piece) - 2 for piece in pieces) == 148 and len(pieces) == 5
        expected.append(F.normalize(torch.stack([direct(model, piece) for piece in pieces]).mean(0), dim=-1))
    torch.testing.assert_close(chunked.read(documents), torch.stack(expected), rtol=1e-5, atol=1e-6)
    truncated = Embedder(SystemSpec.parse(f"trunc:{workspace / 'tiny'}"), 150, torch.device("cpu"), batch_tokens=256)
    expected = torch.stack([direct(model, document[: TABLE - 1] + document[-1:]) for document in documents])
    torch.testing.assert_close(truncated.read(documents), expected, rtol=1e-5, atol=1e-6)
    queries = tokenizer(["what is the pass key for Abigail?", "what?"])["input_ids"]
    expected = torch.stack([direct(model, query) for query in queries])
    torch.testing.assert_close(truncated.read(queries), expected, rtol=1e-5, atol=1e-6)


def arguments(workspace, out, *systems_and_options: str):
    """The run's options: 6 documents and 4 queries at 120 and 200 tokens unless `systems_and_options` (the
    systems, then options) say else."""
    defaults = ["--out", str(out), "--text", str(workspace / "text.txt"), "--documents", "6", "--queries", "4"]
    defaults += ["--bootstrap", "200", "--lengths", "120", "200"]
    return parse_systems_then_options(longembed_parser(), defaults, systems_and_options)


@pytest.fixture
def loaded(monkeypatch):
    return record_loaded_systems(monkeypatch)


def test_a_run_writes_every_cell_resumes_and_pairs_on_the_same_queries(workspace, tmp_path, loaded):
    tiny = str(workspace / "tiny")
    trunc, chunk, bag = f"trunc:{tiny}", f"chunk:{tiny}", f"tisa:replace:0:{tiny}"
    record = longembed.run(arguments(workspace, tmp_path / "out", trunc, bag, "--paired", trunc))
    assert loaded == [trunc, bag]
    assert (tmp_path / "out" / "longembed.png").is_file()
    saved = json.loads((tmp_path / "out" / "longembed.json").read_text())
    assert saved["results"] == record["results"]
    for system in (trunc, bag):
        for task in ("passkey", "needle"):
            for length in ("120", "200"):
                cell = saved["results"][system][task][length]
                assert len(cell["correct"]) == 4 and cell["acc_at_1"] == sum(cell["correct"]) / 4
                assert cell["machine"] == machine(torch.device("cpu")) == saved["machine"]
    difference = saved["paired"][trunc][bag]["needle"]["200"]
    ours, theirs = (saved["results"][name]["needle"]["200"]["correct"] for name in (bag, trunc))
    assert difference["difference"] == pytest.approx((sum(ours) - sum(theirs)) / 4)
    assert difference["low"] <= difference["difference"] <= difference["high"]
    tables = (tmp_path / "out" / "longembed.md").read_text()
    needle = saved["results"][bag]["needle"]
    assert f"| {bag} | {needle['120']['acc_at_1']:.2f} | {needle['200']['acc_at_1']:.2f} |" in tables
    low, high = f"{difference['low']:+.2f}", f"{difference['high']:+.2f}"
    assert f"| {difference['difference']:+.2f} [{low}, {high}]" in tables.split(f"needle: Acc@1 minus {trunc}'s")[1]

    loaded.clear()  # a rerun with one more system measures only that system's cells
    longembed.run(arguments(workspace, tmp_path / "out", trunc, bag, chunk, "--paired", trunc))
    assert loaded == [chunk]
    again = json.loads((tmp_path / "out" / "longembed.json").read_text())
    assert again["results"][trunc] == saved["results"][trunc] and set(again["paired"][trunc]) == {bag, chunk}

    # a rerun with another reference measures nothing and keeps the earlier reference's table
    longembed.run(arguments(workspace, tmp_path / "out", trunc, bag, chunk, "--paired", chunk))
    assert loaded == [chunk]
    kept = json.loads((tmp_path / "out" / "longembed.json").read_text())["paired"]
    assert list(kept) == [trunc, chunk] and kept[trunc] == again["paired"][trunc] and set(kept[chunk]) == {trunc, bag}

    with pytest.raises(UsageError) as error:
        longembed.run(arguments(workspace, tmp_path / "out", trunc, "--seed", "3"))
    assert str(error.value) == (
        f"{tmp_path / 'out' / 'longembed.json'} holds results of other settings (seed 0 -> 3); rerun with its "
        "settings to resume, or choose another --out, or pass --overwrite to start over."
    )
    assert loaded == [chunk]


def test_a_long_cell_resumes_at_its_next_document(workspace, tmp_path, monkeypatch):
    bag = f"tisa:replace:0:{workspace / 'tiny'}"
    options = ("--lengths", "120", "--batch-tokens", "100")  # a forward pass a document: its cells keep them
    whole = longembed.run(arguments(workspace, tmp_path / "whole", bag, *options))
    real_read, documents_read = Embedder.read, []

    def read_until_stopped(self, sequences, progress=None):
        if len(sequences) == 1 and len(sequences[0]) == 120:  # a document, not the queries
            if stop_after is not None and len(documents_read) == stop_after:
                raise RuntimeError("stopped")
            documents_read.append(sequences[0])
        return real_read(self, sequences, progress)

    monkeypatch.setattr(Embedder, "read", read_until_stopped)
    stop_after = 3
    with pytest.raises(RuntimeError, match="stopped"):
        longembed.run(arguments(workspace, tmp_path / "out", bag, *options))
    kept = json.loads((tmp_path / "out" / "embeddings" / file_name(bag) / "passkey-120.json").read_text())
    assert kept["documents"] == 3

    stop_after = None
    documents_read.clear()
    resumed = longembed.run(arguments(workspace, tmp_path / "out", bag, *options))
    assert len(documents_read) == 3 + 6  # the rest of the passkey cell, then the whole needle cell
    for task in ("passkey", "needle"):
        cell, reference = resumed["results"][bag][task]["120"], whole["results"][bag][task]["120"]
        assert cell["correct"] == reference["correct"]
        scores = [np.load(scores_path(out, bag, f"{task}-120")) for out in (tmp_path / "out", tmp_path / "whole")]
        np.testing.assert_array_equal(*scores)
    assert resumed["results"][bag]["passkey"]["120"]["resumed_after_documents"] == 3
    assert "resumed_after_documents" not in resumed["results"][bag]["needle"]["120"]
    assert not (tmp_path / "out" / "embeddings").exists()  # kept only until their cell is recorded


def test_the_late_readout_scores_by_maxsim_and_a_long_cell_keeps_its_scores_until_recorded(
    workspace, tmp_path, monkeypatch
):
    """late:chunk: each chunk's token states; late:MODEL (S = 0 reads any length): the whole document's, in a long
    cell (here: a forward pass a document) each document's MaxSim scores kept, so a stopped cell resumes at its
    next one."""
    tiny = workspace / "tiny"
    chunked, whole = f"late:chunk:{tiny}", f"late:tisa:replace:0:{tiny}"
    options = ("--lengths", "120", "--batch-tokens", "100")
    real_read_tokens, calls = Embedder.read_tokens, []

    def read_until_stopped(self, sequence):
        if self.spec.spec == whole and len(sequence) == 120:
            if len(calls) == 2:
                raise RuntimeError("stopped")
            calls.append(sequence)
        return real_read_tokens(self, sequence)

    monkeypatch.setattr(Embedder, "read_tokens", read_until_stopped)
    with pytest.raises(RuntimeError, match="stopped"):
        longembed.run(arguments(workspace, tmp_path / "out", chunked, whole, *options))
    kept = tmp_path / "out" / "embeddings" / file_name(whole)
    assert np.load(kept / "passkey-120.npy").shape == (2, 4)  # (documents, queries)
    assert json.loads((kept / "passkey-120.json").read_text())["documents"] == 2
    monkeypatch.setattr(Embedder, "read_tokens", real_read_tokens)
    record = longembed.run(arguments(workspace, tmp_path / "out", chunked, whole, *options))
    assert record["results"][whole]["passkey"]["120"]["resumed_after_documents"] == 2
    assert not (tmp_path / "out" / "embeddings").exists()

    plain = AutoModel.from_pretrained(tiny).eval()
    bag = AutoModel.from_pretrained(tiny, tisa=TisaConfig(num_kernels=0, mode="replace")).eval()

    def tokens(model, ids):
        with torch.no_grad():
            return F.normalize(model(input_ids=torch.tensor([ids])).last_hidden_state[0, 1:-1], dim=-1)

    readers = {
        chunked: lambda ids: torch.cat([tokens(plain, piece) for piece in chunks_of(ids, TABLE)]),
        whole: lambda ids: tokens(bag, ids),
    }
    retrieval = build_task("passkey", 120, tiny_tokenizer(), documents=6, queries=4, seed=0)
    for system, read in readers.items():
        documents = [read(ids) for ids in retrieval.documents]
        expected = [
            [(read(query) @ document.T).max(dim=1).values.mean().item() for document in documents]
            for query in retrieval.query_ids
        ]
        got = np.load(scores_path(tmp_path / "out", system, "passkey-120"))
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)


def test_bad_requests_fail_in_one_line_before_any_model_loads(workspace, tmp_path, loaded):
    tiny = str(workspace / "tiny")
    tokenizer = tiny_tokenizer()
    room = max(map(len, tokenize_articles([fact.text for fact in needle_facts()], tokenizer))) + 2
    shortest = min(map(len, tokenize_articles([fact.text for fact in needle_facts()], tokenizer)))
    text_tokens = len(text_haystack(workspace / "text.txt", tokenizer).tokens)
    no_tokenizer = tmp_path / "no-tokenizer"
    shutil.copytree(tiny, no_tokenizer)
    for file in no_tokenizer.glob("tok*"):
        file.unlink()
    cases = {
        (f"trunc:{tiny}", "--tasks", "needle", "--lengths", "40"): (
            f"--lengths 40 is shorter than the needle needle: its longest takes {room} tokens with the special "
            f"tokens; give lengths of at least {room}."
        ),
        (f"trunc:{tiny}", "--tasks", "needle", "--lengths", "100000"): (
            f"The --text holds {text_tokens} tokens, too few for --lengths 100000 (a document needs up to "
            f"{100000 - 2 - shortest} tokens of text); give a longer text or shorter lengths."
        ),
        (f"tisa:add:2:{tiny}",): (
            f"tisa:add:2:{tiny} cannot read 120 tokens: its position table holds 32 and TISA mode='add' keeps its "
            f"position embeddings. Give lengths up to 32, or read longer documents with trunc:{tiny}, chunk:{tiny}, "
            f"interp:{tiny} or a replace-mode model."
        ),
        (tiny,): (
            f"{tiny} cannot read 120 tokens: its position table holds 32 and it has no TISA. Give lengths up to 32, "
            f"or read longer documents with trunc:{tiny}, chunk:{tiny}, interp:{tiny} or a replace-mode model."
        ),
        (f"trunc:{tiny}", f"chunk:{no_tokenizer}"): (
            f"chunk:{no_tokenizer}: model {no_tokenizer} is a model folder without a tokenizer (none of "
            f"{', '.join(TOKENIZER_FILES)}), as save_pretrained writes a model alone; save the tokenizer it was "
            f"trained with into it (tokenizer.save_pretrained({str(no_tokenizer)!r})), or {model_remedy('model')}."
        ),
        (f"tisa:sideways:2:{tiny}",): (
            f"tisa:sideways:2:{tiny}: write tisa:MODE:S:MODEL, MODE add or replace and S a whole number."
        ),
        (f"trunc:{tiny}", "--queries", "7"): "--queries 7 is more than --documents 6; each asks for one.",
    }
    for given, message in cases.items():
        with pytest.raises(UsageError) as error:
            longembed.run(arguments(workspace, tmp_path / "out", *given))
        assert str(error.value) == message, given
    assert loaded == [] and not (tmp_path / "out").exists()


def test_bm25_and_a_hybrid_score_the_decoded_documents_and_resume_from_kept_scores(workspace, tmp_path, loaded):
    tiny = str(workspace / "tiny")
    trunc, hybrid = f"trunc:{tiny}", f"hybrid:bm25+trunc:{tiny}"
    record = longembed.run(arguments(workspace, tmp_path / "out", "bm25", trunc, hybrid, "--lengths", "120"))
    assert loaded == [trunc]
    tokenizer = tiny_tokenizer()
    stream = text_haystack(workspace / "text.txt", tokenizer)
    for task in ("passkey", "needle"):
        built = build_task(task, 120, tokenizer, documents=6, queries=4, seed=0, text_stream=stream)
        lexical = bm25_scores(
            tokenizer.batch_decode(built.documents, skip_special_tokens=True), built.queries, "english"
        )
        expected = [int(rank == 1) for rank in answer_ranks(lexical, built.answers)]
        assert record["results"]["bm25"][task]["120"]["correct"] == expected
        dense = np.load(scores_path(tmp_path / "out", trunc, f"{task}-120"))
        fused = answer_ranks(reciprocal_rank_fusion(lexical, dense), built.answers)
        assert record["results"][hybrid][task]["120"]["correct"] == [int(rank == 1) for rank in fused]
    shutil.rmtree(tmp_path / "out" / "scores")  # a record from before scores were kept: the hybrid's parts again
    finished = {name: record["results"].pop(name) for name in (hybrid,)}
    (tmp_path / "out" / "longembed.json").write_text(json.dumps(record))
    loaded.clear()
    again = longembed.run(arguments(workspace, tmp_path / "out", "bm25", trunc, hybrid, "--lengths", "120"))
    assert loaded == [trunc]
    for task in ("passkey", "needle"):
        assert again["results"][hybrid][task]["120"]["correct"] == finished[hybrid][task]["120"]["correct"]
        assert again["results"][trunc][task]["120"]["correct"] == record["results"][trunc][task]["120"]["correct"]


def test_systems_with_equal_numbers_stay_visible_in_the_plot():
    cell = {"acc_at_1": 0.5}
    record = {
        "settings": {"tasks": ["needle"], "lengths": [512, 1024]},
        "results": {name: {"needle": {"512": cell, "1024": cell}} for name in ("trunc:m", "chunk:m", "interp:m")},
    }
    lines = longembed.accuracy_figure(record).axes[0].get_lines()
    assert len(lines) == 3
    assert len({line.get_marker() for line in lines}) == 3  # each its own marker
    assert len({tuple(line.get_xdata()) for line in lines}) == 3  # and shifted apart along the length axis
    for line in lines:
        assert all(abs(x / length - 1) < 0.1 for x, length in zip(line.get_xdata(), (512, 1024), strict=True))


@pytest.mark.parametrize(
    ("parser", "shown"),
    [
        (
            longembed_parser,
            [
                "--text TEXT           Plain text the needle task's documents are cut from (default: WikiText-2's "
                "test split from the Hub, Salesforce/wikitext wikitext-2-raw-v1).",
                "(default: [256, 512, 1024, 2048, 4096, 8192])",
                "Candidate documents per length (<= 100). (default: 100)",
                "Queries per length (<= --documents). (default: 50)",
            ],
        ),
        (sts_parser, ["GLUE's STS-B TSV, dev.tsv, the labelled split (default: its validation split from the Hub,"]),
        (
            qmsum_parser,
            ["--data DATA QMSum's meetings: the folder of its train/ and val/ folders (data/ALL).", "(default: 32768)"],
        ),
    ],
)
def test_help_shows_every_default(parser, shown):
    text = " ".join(parser().format_help().split())  # argparse wraps to the terminal's width
    for part in shown:
        assert " ".join(part.split()) in text
    assert "(default: None)" not in text and "(default: False)" not in text


def test_a_missing_text_names_the_option_to_pass(workspace, tmp_path, loaded):
    missing = tmp_path / "shared" / "test.txt"
    with pytest.raises(UsageError) as error:
        longembed.run(arguments(workspace, tmp_path / "out", f"trunc:{workspace / 'tiny'}", "--text", str(missing)))
    assert str(error.value) == (
        f"--text {missing}: no such file; pass --text with a plain-text file to cut the needle task's documents from "
        "(WikiText-2's test.txt)."
    )
    assert loaded == []


def test_work_keeps_the_scores_a_later_hybrid_fuses_and_out_keeps_the_records(workspace, tmp_path, loaded):
    """--work: every cell's scores are kept there, --out holds the record, tables and plot, and a hybrid added by a
    later call fuses the kept scores without loading the model again, as a run without --work does."""
    tiny = str(workspace / "tiny")
    trunc, hybrid = f"trunc:{tiny}", f"hybrid:bm25+trunc:{tiny}"
    work = ["--work", str(tmp_path / "work"), "--lengths", "120"]
    longembed.run(arguments(workspace, tmp_path / "out", "bm25", trunc, *work))
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == [
        "longembed.json",
        "longembed.md",
        "longembed.png",
    ]
    assert sorted(path.name for path in (tmp_path / "work").iterdir()) == ["scores", "work.json"]
    loaded.clear()
    fused = longembed.run(arguments(workspace, tmp_path / "out", "bm25", trunc, hybrid, *work))
    assert loaded == []
    alone = longembed.run(arguments(workspace, tmp_path / "alone", "bm25", trunc, hybrid, "--lengths", "120"))
    for task in ("passkey", "needle"):
        assert fused["results"][hybrid][task]["120"]["correct"] == alone["results"][hybrid][task]["120"]["correct"]
        kept, direct = (
            np.load(scores_path(folder, hybrid, f"{task}-120")) for folder in (tmp_path / "work", tmp_path / "alone")
        )
        assert np.array_equal(kept, direct)
