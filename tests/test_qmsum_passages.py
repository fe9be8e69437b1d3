"""`tisa-hf qmsum-passages`: windows and relevance from a tiny folder in QMSum's format (and the counts of the real
files where ../shared has them), every system's window scores against direct computations in both cells, resuming a
finished run without computing or writing anything new, and the one-line refusals before any model loads."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from embedding_fixtures import direct_embedding, record_loaded_systems, tiny_tokenizer, write_tiny_encoder

from tisa_hf.errors import UsageError

pytest.importorskip("sentence_transformers")
pytest.importorskip("bm25s")
from tisa_hf.common.result_files import scores_path  # noqa: E402
from tisa_hf.embeddings import lexical  # noqa: E402
from tisa_hf.embeddings.options import passages_parser  # noqa: E402
from tisa_hf.embeddings.retrieval import passages  # noqa: E402
from tisa_hf.embeddings.retrieval.passage_data import cut_windows, read_specific_queries  # noqa: E402
from tisa_hf.embeddings.retrieval.ranking import reciprocal_rank_fusion  # noqa: E402

SHARED_QMSUM = Path(__file__).resolve().parents[2] / "shared" / "longdoc" / "qmsum"
# Each meeting's turns (speaker, content) in the tiny tokenizer's words, each word one token, "x:" two: train/M1's
# turns are 4 tokens, train/M2's 8, val/M3's 3 and 7
MEETINGS = {
    "train/M1": [("a", "the sky")] * 5,
    "train/M2": [("b", "green grass is blue sun yellow")] * 3,
    "val/M3": [("c", "sun"), ("c", "sky blue is green grass")],
}
SPECIFIC = {  # each meeting's specific queries: text and relevant_text_span
    "train/M1": [("what is the sky", [["1", "2"]]), ("the sun", [["0", "0"], ["4", "4"]])],
    "train/M2": [("what is green", [["1", "1"]])],
    "val/M3": [("the sun", [["0", "0"]]), ("blue sky", [["1", "1"]])],
}


def write_meetings(folder: Path, specific: dict = SPECIFIC) -> Path:
    for name, turns in MEETINGS.items():
        meeting = {
            "topic_list": [],
            "general_query_list": [{"query": "Summarize the whole meeting.", "answer": f"{name} went well"}],
            "specific_query_list": [
                {"query": query, "answer": "an answer", "relevant_text_span": span}
                for query, span in specific.get(name, [])
            ],
            "meeting_transcripts": [{"speaker": speaker, "content": content} for speaker, content in turns],
        }
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.json").write_text(json.dumps(meeting))
    return folder


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("passages")
    write_tiny_encoder(root / "tiny", positions=32)
    write_meetings(root / "qmsum")
    return root


def token_ids(task) -> list[list[int]]:
    return tiny_tokenizer()(task.documents)["input_ids"]


def test_windows_and_their_relevance_are_cut_from_each_meetings_tokens(workspace):
    task = read_specific_queries(workspace / "qmsum")
    assert task.names == list(MEETINGS) and task.answers == [0, 0, 1, 2, 2]
    assert task.queries == ["what is the sky", "the sun", "what is green", "the sun", "blue sky"]
    assert task.relevant_turns == [[(1, 2)], [(0, 0), (4, 4)], [(1, 1)], [(0, 0)], [(1, 1)]]
    assert [len(ids) - 2 for ids in token_ids(task)] == [20, 24, 10]

    # W = 6: 4 tokens a window, so M1's turn k is window k, M2's turn k windows 5 + 2k and 6 + 2k, and M3's 10
    # tokens are windows 11 (turn 0 and the start of turn 1), 12 and 13 (turn 1)
    windows = cut_windows(task, tiny_tokenizer(), token_ids(task), 6)
    assert windows.of_meeting == [range(0, 5), range(5, 11), range(11, 14)]
    assert windows.turns[9:] == [(2, 2), (2, 2), (0, 1), (1, 1), (1, 1)]
    assert windows.texts[0] == "a: the sky" and windows.texts[11:] == ["c: sun\nc", ": sky blue is", "green grass"]
    assert windows.relevant == [[1, 2], [0, 4], [7, 8], [11], [11, 12, 13]]

    # W = 10: 8 tokens a window, two of M1's turns, one of M2's, M3's first 8 tokens and its last 2
    windows = cut_windows(task, tiny_tokenizer(), token_ids(task), 10)
    assert windows.of_meeting == [range(0, 3), range(3, 6), range(6, 8)]
    assert windows.relevant == [[0, 1], [0, 2], [4], [6], [6, 7]]


@pytest.mark.skipif(not SHARED_QMSUM.is_dir(), reason="../shared/longdoc/qmsum is absent")
def test_the_real_files_give_the_documented_counts():
    from transformers import AutoTokenizer

    from tisa_hf import minilm_path

    task = read_specific_queries(SHARED_QMSUM)
    assert (len(task.documents), len(task.queries), len(set(task.queries))) == (197, 1332, 1310)
    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    documents = tokenizer(task.documents, verbose=False)["input_ids"]
    assert max(map(len, documents)) == 36718
    counts = {}
    for window in (128, 256, 512):
        windows = cut_windows(task, tokenizer, documents, window)
        counts[window] = (len(windows.texts), sum(map(len, windows.relevant)))
    assert counts == {128: (20922, 14714), 256: (10425, 8039), 512: (5242, 4683)}


def arguments(workspace, out, *systems_and_options: str):
    defaults = ["--out", str(out), "--data", str(workspace / "qmsum"), "--tokenizer", str(workspace / "tiny")]
    first = next((i for i, item in enumerate(systems_and_options) if item.startswith("--")), len(systems_and_options))
    given = [*systems_and_options[:first], *defaults, "--bootstrap", "100", *systems_and_options[first:]]
    return passages_parser().parse_args(given)


@pytest.fixture
def loaded(monkeypatch):
    return record_loaded_systems(monkeypatch)


def test_windows_read_apart_or_pooled_from_the_whole_read_score_as_computed_directly(workspace, tmp_path):
    """chunk:: each window read apart as [CLS] window [SEP]; a whole read (tisa:replace): the mean of the meeting's
    token states over the window; late: MaxSim against the window's token vectors; BM25 over the windows' text;
    within a meeting, every other meeting's windows are out (-inf) and the hybrid fuses the ranks among the rest."""
    from transformers import AutoModel

    from tisa_hf.config import TisaConfig

    tiny = str(workspace / "tiny")
    chunked, whole, late = f"chunk:{tiny}", f"tisa:replace:2:{tiny}", f"late:tisa:replace:2:{tiny}"
    hybrid = f"hybrid:bm25+{whole}"
    out = tmp_path / "out"
    record = passages.run(arguments(workspace, out, "bm25", chunked, whole, late, hybrid, "--window-tokens", "6"))
    task = read_specific_queries(workspace / "qmsum")
    documents, queries = token_ids(task), tiny_tokenizer()(task.queries)["input_ids"]
    windows = cut_windows(task, tiny_tokenizer(), documents, 6)
    spans = [(start, min(start + 4, len(ids) - 2)) for ids in documents for start in range(0, len(ids) - 2, 4)]
    meeting_of = [m for m, ids in enumerate(documents) for _ in range(0, len(ids) - 2, 4)]

    plain = AutoModel.from_pretrained(tiny).eval()
    patched = AutoModel.from_pretrained(tiny, tisa=TisaConfig(num_kernels=2, mode="replace")).eval()
    with torch.no_grad():
        states = [patched(input_ids=torch.tensor([ids])).last_hidden_state[0, 1:-1] for ids in documents]
    apart = torch.stack(
        [
            direct_embedding(plain, [documents[m][0], *documents[m][1 + a : 1 + b], documents[m][-1]])
            for m, (a, b) in zip(meeting_of, spans, strict=True)
        ]
    )
    pooled = F.normalize(
        torch.stack([states[m][a:b].mean(0) for m, (a, b) in zip(meeting_of, spans, strict=True)]), dim=-1
    )
    with torch.no_grad():
        query_vectors = torch.stack([direct_embedding(plain, ids) for ids in queries])
        patched_queries = torch.stack([direct_embedding(patched, ids) for ids in queries])
        query_tokens = [
            F.normalize(patched(input_ids=torch.tensor([ids])).last_hidden_state[0, 1:-1], dim=-1) for ids in queries
        ]
    token_vectors = [F.normalize(states[m][a:b], dim=-1) for m, (a, b) in zip(meeting_of, spans, strict=True)]
    maxsim = [[(q @ w.T).max(dim=1).values.mean().item() for w in token_vectors] for q in query_tokens]
    expected = {
        "bm25": lexical.bm25_scores(windows.texts, task.queries, "english"),
        chunked: (query_vectors @ apart.T).numpy(),
        whole: (patched_queries @ pooled.T).numpy(),
        late: np.array(maxsim),
    }
    own = np.array([[meeting_of[w] == task.answers[q] for w in range(len(spans))] for q in range(len(queries))])
    for system, scores in expected.items():
        np.testing.assert_allclose(np.load(scores_path(out, system, "across")), scores, rtol=0, atol=1e-5)
        within = np.load(scores_path(out, system, "within"))
        assert np.isneginf(within[~own]).all(), system
        np.testing.assert_allclose(within[own], scores[own], rtol=0, atol=1e-5)
    across_hybrid = reciprocal_rank_fusion(expected["bm25"], np.load(scores_path(out, whole, "across")))
    np.testing.assert_allclose(np.load(scores_path(out, hybrid, "across")), across_hybrid)
    for query, meeting in enumerate(task.answers):
        columns = list(windows.of_meeting[meeting])
        parts = [np.load(scores_path(out, system, "across"))[query : query + 1, columns] for system in ("bm25", whole)]
        got = np.load(scores_path(out, hybrid, "within"))[query, columns]
        np.testing.assert_allclose(got, reciprocal_rank_fusion(*parts)[0])
    assert record["settings"]["windows"] == 14 and record["settings"]["relevant_windows_per_query"] == [2, 2, 2, 1, 3]
    assert record["results"][chunked]["throughput"]["vectors_per_document"] == round(14 / 3, 1)
    assert set(record["results"]["bm25"]) >= {"across", "within"}


def test_a_finished_run_resumes_without_computing_or_writing_anything(workspace, tmp_path, loaded, monkeypatch):
    tiny = f"chunk:{workspace / 'tiny'}"
    systems = ("bm25", tiny, f"hybrid:bm25+{tiny}", "--paired", "bm25", "--window-tokens", "10")
    record = passages.run(arguments(workspace, tmp_path / "out", *systems))
    assert loaded == [tiny] and record["results"][tiny]["across"]["relevant_positions"]
    files = {path: path.read_bytes() for path in (tmp_path / "out").rglob("*") if path.is_file()}

    def refuse(*args, **kwargs):
        raise AssertionError("a finished run computed again")

    monkeypatch.setattr("tisa_hf.embeddings.retrieval.scoring.bm25_scores", refuse)
    monkeypatch.setattr("tisa_hf.embeddings.retrieval.readouts.window_vectors", refuse)
    loaded.clear()
    again = passages.run(arguments(workspace, tmp_path / "out", *systems))
    assert loaded == [] and again == json.loads((tmp_path / "out" / "qmsum-passages.json").read_text())
    assert {path: path.read_bytes() for path in (tmp_path / "out").rglob("*") if path.is_file()} == files
    with pytest.raises(UsageError, match=r"holds results of other settings \(.*window_length 10 -> 6"):
        passages.run(arguments(workspace, tmp_path / "out", "bm25", "--window-tokens", "6"))


def test_bad_requests_fail_in_one_line_before_any_model_loads(workspace, tmp_path, loaded):
    tiny = str(workspace / "tiny")
    no_specific = write_meetings(tmp_path / "general-only", specific={})
    outside = write_meetings(tmp_path / "outside", specific={"train/M1": [("what is the sky", [["3", "5"]])]})
    cases = {
        (f"chunk:{tiny}", "--window-tokens", "64"): (
            f"chunk:{tiny} reads each window apart, and a window of 64 tokens is longer than its position table (32); "
            f"give --window-tokens up to 32, or read each document whole: interp:{tiny} or a replace-mode model."
        ),
        ("bm25", "--data", str(no_specific)): (
            f"--data {no_specific} holds no specific queries (specific_query_list entries with relevant_text_span); "
            "pass --data with the folder of QMSum's train and val meetings (data/ALL of the QMSum repository)."
        ),
        ("bm25", "--data", str(outside)): (
            f"{outside / 'train' / 'M1.json'}: the specific query 'what is the sky' has relevant_text_span [3, 5] "
            "outside its 5 turns; pass --data with QMSum's unchanged meeting files."
        ),
        (f"max:chunk:{tiny}",): (
            f"max:chunk:{tiny}: tisa-hf qmsum-passages does not take the max: read-out; tisa-hf qmsum and tisa-hf "
            "spans do."
        ),
        (f"trunc:{tiny}",): f"trunc:{tiny}: a window read apart is chunk:'s reading; write chunk:{tiny}.",
        ("bm25", "--token-states", str(no_specific / "train" / "M1.json")): (
            f"--token-states {no_specific / 'train' / 'M1.json'} is a file; give a folder."
        ),
        ("bm25", "--window-tokens", "2"): (
            "--window-tokens 2: a window needs 3 tokens at least (its [CLS], one of the meeting's, its [SEP])."
        ),
        (f"chunk:{tiny}", "--max-tokens", "6", "--window-tokens", "6"): (
            "--max-tokens cuts the meetings before every relevant turn of 2 queries; give a larger --max-tokens, one "
            "that reads every meeting whole."
        ),
    }
    for given, message in cases.items():
        with pytest.raises(UsageError) as error:
            passages.run(arguments(workspace, tmp_path / "out", *given))
        assert str(error.value) == message, given
    assert loaded == [] and not (tmp_path / "out").exists()


def test_kept_whole_reads_are_reused_across_read_outs_and_windows_with_the_same_scores(workspace, tmp_path):
    """--token-states: the first whole-read system reads each meeting once and keeps its states; its late: twin and
    another W read none again and score bit for bit as runs that read again; another model reads its own."""
    tiny = str(workspace / "tiny")
    whole, late, other = f"tisa:replace:2:{tiny}", f"late:tisa:replace:2:{tiny}", f"interp:{tiny}"
    kept = ["--token-states", str(tmp_path / "states")]
    runs = {
        "first": (whole, "--window-tokens", "6", *kept),
        "twin": (late, "--window-tokens", "6", *kept),
        "other-window": (whole, late, "--window-tokens", "10", *kept),
        "other-model": (other, "--window-tokens", "6", *kept),
    }
    reused = {}
    for name, given in runs.items():
        record = passages.run(arguments(workspace, tmp_path / name, *given))
        reused[name] = {
            system: result["throughput"]["whole_reads_reused"] for system, result in record["results"].items()
        }
        again = passages.run(
            arguments(workspace, tmp_path / f"{name}-read-again", *given[: given.index("--token-states")])
        )
        for system in again["results"]:
            for cell in ("across", "within"):
                expected = np.load(scores_path(tmp_path / f"{name}-read-again", system, cell))
                assert np.array_equal(np.load(scores_path(tmp_path / name, system, cell)), expected), (name, system)
    assert reused == {
        "first": {whole: 0},
        "twin": {late: 3},
        "other-window": {whole: 3, late: 3},
        "other-model": {other: 0},
    }
    folders = sorted(path for path in (tmp_path / "states").iterdir())
    assert [len(list(folder.glob("*.npy"))) for folder in folders] == [3, 3]
    about = sorted(json.loads((folder / "model.json").read_text())["system"] for folder in folders)
    assert about == sorted([whole, other])


def test_kept_documents_show_the_rate_and_time_left_every_30_seconds_in_a_log(tmp_path, monkeypatch, caplog):
    """A run's documents (a late: read-out of whole meetings takes minutes each) report, where no terminal shows
    tqdm's bar, tqdm's count, elapsed and remaining time and rate every 30 seconds and at the end, rather than
    every tenth document (40 minutes apart at 0.04 documents a second)."""
    import itertools
    import logging

    from tisa_hf.embeddings.retrieval import kept_embeddings

    clock = itertools.count(0.0, 10.0)  # each reading of the clock 10 seconds on
    monkeypatch.setattr(kept_embeddings.time, "perf_counter", lambda: next(clock))
    with caplog.at_level(logging.INFO, logger="tisa_hf"):
        kept = kept_embeddings.embed_documents(
            lambda document: np.ones((1, 2)), [[1, 2], [3], [4, 5, 6]], tmp_path, "late:model", "tokens"
        )
    assert kept["documents"] == 3
    assert [record.getMessage() for record in caplog.records] == [
        "late:model: 1/3 documents [00:30<01:00, 30.00s/document]",
        "late:model: 2/3 documents [01:00<00:30, 30.00s/document]",
        "late:model: 3/3 documents [01:30<00:00, 30.00s/document]",
    ]
