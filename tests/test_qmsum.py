"""`tisa-hf qmsum`: the QMSum builder on a tiny fixture in QMSum's format (and on the real files where
../shared has them), BM25 and hybrid systems against direct computations, resuming mid-system, and the one-line
refusals before any model loads."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from embedding_fixtures import WORDS, parse_systems_then_options, record_loaded_systems, write_tiny_encoder
from transformers import AutoTokenizer

from tests.fixtures import write_wikitext
from tisa_hf.errors import UsageError

pytest.importorskip("sentence_transformers")
pytest.importorskip("bm25s")
from tisa_hf.common.result_files import file_name, scores_path  # noqa: E402
from tisa_hf.embeddings.lexical import bm25_scores  # noqa: E402
from tisa_hf.embeddings.options import qmsum_parser  # noqa: E402
from tisa_hf.embeddings.retrieval import qmsum  # noqa: E402
from tisa_hf.embeddings.retrieval.corpus_task import cut  # noqa: E402
from tisa_hf.embeddings.retrieval.qmsum_data import read_meetings, reading_meeting  # noqa: E402
from tisa_hf.embeddings.retrieval.ranking import LateInteraction, answer_ranks, per_query, reciprocal_rank_fusion  # noqa: E402
from tisa_hf.embeddings.retrieval.readouts import MaxScorer  # noqa: E402
from tisa_hf.embeddings.systems import Embedder  # noqa: E402

SHARED_QMSUM = Path(__file__).resolve().parents[2] / "shared" / "longdoc" / "qmsum"
REPEATED = "the group agreed on the sky and the sun"  # one summary of two meetings


def write_meetings(folder: Path, seed: int = 0, turns: tuple[int, ...] = (8, 8, 8, 8)) -> None:
    """QMSum's layout: train/ and val/ of one JSON file a meeting; 3 + 1 meetings of `turns` turns, 2-3 summaries
    each, one summary text in two meetings."""
    rng = random.Random(seed)
    sizes = {"train/Bdb001": 3, "train/ES2002a": 2, "train/TS3003b": 2, "val/IS1000a": 2}
    for index, (name, summaries) in enumerate(sizes.items()):
        words = [" ".join(rng.choices(WORDS, k=12)) for _ in range(turns[index])]
        turns_of = [{"speaker": f"Speaker {turn % 3}", "content": content} for turn, content in enumerate(words)]
        pairs = [
            {"query": "q?", "answer": f"{name} summary {k}: " + " ".join(rng.choices(WORDS, k=6))}
            for k in range(summaries)
        ]
        specific = [{"query": "s?", "answer": REPEATED, "relevant_text_span": [["0", "1"]]}] if index in (0, 2) else []
        meeting = {"topic_list": [], "general_query_list": pairs[:1], "specific_query_list": pairs[1:] + specific}
        meeting["meeting_transcripts"] = turns_of
        (folder / name).parent.mkdir(parents=True, exist_ok=True)
        (folder / f"{name}.json").write_text(json.dumps(meeting))


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("qmsum")
    write_tiny_encoder(root / "tiny", positions=32)
    write_meetings(root / "qmsum")
    return root


def test_the_builder_counts_documents_and_queries_and_each_query_has_one_meeting(workspace):
    meetings = read_meetings(workspace / "qmsum")
    assert meetings.names == ["train/Bdb001", "train/ES2002a", "train/TS3003b", "val/IS1000a"]
    assert len(meetings.queries) == 3 + 2 + 2 + 2 + 1 and meetings.repeated_summaries == 1
    source = json.loads((workspace / "qmsum" / "train" / "Bdb001.json").read_text())
    first = source["meeting_transcripts"][0]
    assert meetings.documents[0].split("\n")[0] == f"{first['speaker']}: {first['content']}"
    assert len(meetings.documents[0].split("\n")) == 8
    for query, answer in zip(meetings.queries, meetings.answers, strict=True):
        owners = [name for name in meetings.names if query.startswith(name)]
        assert owners == [meetings.names[answer]] or (query == REPEATED and answer == 0)
    assert meetings.queries.count(REPEATED) == 1
    first_two = read_meetings(workspace / "qmsum", limit=2)
    assert len(first_two.documents) == 2 and len(first_two.queries) == 3 + 1 + 2 and max(first_two.answers) == 1


@pytest.mark.skipif(not SHARED_QMSUM.is_dir(), reason="../shared/longdoc/qmsum is absent")
def test_the_real_rebuild_has_longembeds_sizes():
    meetings = read_meetings(SHARED_QMSUM)
    assert (len(meetings.documents), len(meetings.queries), meetings.repeated_summaries) == (197, 1527, 2)
    words = np.mean([len(document.split()) for document in meetings.documents])
    assert round(words) == 10058  # LongEmbed's stated mean, speaker names included


def arguments(workspace, out, *systems_and_options: str):
    defaults = ["--out", str(out), "--data", str(workspace / "qmsum"), "--bootstrap", "200", "--max-tokens", "200"]
    return parse_systems_then_options(qmsum_parser(), defaults, systems_and_options)


@pytest.fixture
def loaded(monkeypatch):
    return record_loaded_systems(monkeypatch)


def test_bm25_and_a_hybrid_equal_direct_computations_and_a_rerun_adds_systems(workspace, tmp_path, loaded):
    tiny = str(workspace / "tiny")
    chunk, hybrid, convex = f"chunk:{tiny}", f"hybrid:bm25+chunk:{tiny}", f"convex:0.3:bm25+chunk:{tiny}"
    record = qmsum.run(arguments(workspace, tmp_path / "out", "bm25", chunk, hybrid, convex, "--paired", chunk))
    assert loaded == [chunk]
    meetings = read_meetings(workspace / "qmsum")
    lexical = bm25_scores(meetings.documents, meetings.queries, "english")
    assert record["results"]["bm25"]["ranks"] == answer_ranks(lexical, meetings.answers)
    dense = np.load(scores_path(tmp_path / "out", chunk, "qmsum"))
    fused = reciprocal_rank_fusion(lexical, dense)
    assert record["results"][hybrid]["ranks"] == answer_ranks(fused, meetings.answers)
    normalised = [
        (scores - scores.min(1, keepdims=True)) / np.ptp(scores, 1, keepdims=True)
        for scores in (lexical.astype(float), dense.astype(float))  # fused in float64, as the scorer does
    ]
    np.testing.assert_allclose(
        np.load(scores_path(tmp_path / "out", convex, "qmsum")), 0.7 * normalised[0] + 0.3 * normalised[1]
    )
    assert record["systems"][convex] == {"model": None, "reading": "hybrid", "fuses": ["bm25", chunk], "weight": 0.3}
    for name, result in record["results"].items():
        assert result["ndcg_at_10"] == pytest.approx(np.mean(per_query("ndcg_at_10", result["ranks"]))), name
        assert len(result["ranks"]) == 10
    speed = record["results"][chunk]["throughput"]
    assert speed["documents"] == 4 and speed["document_tokens"] > 4 * 32 and speed["tokens_per_s"] > 0
    paired = record["paired"][chunk]["bm25"]["ndcg_at_10"]
    assert paired["difference"] == pytest.approx(
        record["results"]["bm25"]["ndcg_at_10"] - record["results"][chunk]["ndcg_at_10"]
    )
    tables = (tmp_path / "out" / "qmsum.md").read_text()
    assert f"| bm25 | {100 * record['results']['bm25']['ndcg_at_10']:.1f} |" in tables
    assert (tmp_path / "out" / "qmsum.png").is_file()

    loaded.clear()
    trunc = f"trunc:{tiny}"
    again = qmsum.run(arguments(workspace, tmp_path / "out", "bm25", chunk, hybrid, convex, trunc, "--paired", "bm25"))
    assert loaded == [trunc] and again["results"]["bm25"] == record["results"]["bm25"]
    # the earlier reference's table is kept, with the new system in it, beside the new reference's
    assert list(again["paired"]) == [chunk, "bm25"]
    assert again["paired"][chunk]["bm25"] == record["paired"][chunk]["bm25"] and trunc in again["paired"][chunk]
    assert set(again["paired"]["bm25"]) == {chunk, hybrid, convex, trunc}


def interrupted_at_the_third_document(read):
    """`Embedder.read` that raises Ctrl-C's KeyboardInterrupt on its fourth call: the queries, then the third
    document."""
    calls = []

    def failing(self, sequences, progress=None):
        calls.append(len(sequences))
        if len(calls) == 4:
            raise KeyboardInterrupt
        return read(self, sequences, progress)

    return failing


def test_an_interrupted_system_resumes_at_its_next_document(workspace, tmp_path, loaded, monkeypatch):
    tiny = f"chunk:{workspace / 'tiny'}"
    whole = qmsum.run(arguments(workspace, tmp_path / "whole", tiny))
    read = Embedder.read
    failing = interrupted_at_the_third_document(read)
    monkeypatch.setattr(Embedder, "read", failing)
    with pytest.raises(KeyboardInterrupt):
        qmsum.run(arguments(workspace, tmp_path / "out", tiny))
    monkeypatch.setattr(Embedder, "read", read)
    read_documents = []
    monkeypatch.setattr(
        Embedder, "read", lambda self, s, progress=None: read_documents.append(len(s)) or read(self, s, progress)
    )
    resumed = qmsum.run(arguments(workspace, tmp_path / "out", tiny))
    assert read_documents == [10, 1, 1]  # the queries, then documents 3 and 4 only
    assert resumed["results"][tiny]["ranks"] == whole["results"][tiny]["ranks"]
    assert resumed["results"][tiny]["throughput"]["documents"] == 4


def test_work_keeps_what_a_rerun_rebuilds_apart_from_the_records(workspace, tmp_path, loaded, monkeypatch):
    """--work: the embeddings an interrupted system resumes from and the scores a later hybrid fuses live there, --out
    holds the record, tables and plot only, and the numbers are those of a run without it; a work folder serves one
    --out."""
    tiny = f"chunk:{workspace / 'tiny'}"
    whole = qmsum.run(arguments(workspace, tmp_path / "whole", tiny))
    read = Embedder.read
    failing = interrupted_at_the_third_document(read)
    work = ["--work", str(tmp_path / "work")]
    monkeypatch.setattr(Embedder, "read", failing)
    with pytest.raises(KeyboardInterrupt):
        qmsum.run(arguments(workspace, tmp_path / "out", tiny, *work))
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == ["qmsum.json"]
    assert json.loads((tmp_path / "work" / "work.json").read_text()) == {"out": str((tmp_path / "out").resolve())}
    monkeypatch.setattr(Embedder, "read", read)
    resumed = qmsum.run(arguments(workspace, tmp_path / "out", tiny, *work))
    assert resumed["results"][tiny]["ranks"] == whole["results"][tiny]["ranks"]
    assert resumed["results"][tiny]["throughput"]["documents"] == 4
    assert sorted(path.name for path in (tmp_path / "out").iterdir()) == ["qmsum.json", "qmsum.md", "qmsum.png"]
    assert sorted(path.name for path in (tmp_path / "work").iterdir()) == ["embeddings", "scores", "work.json"]

    loaded.clear()
    hybrid = f"hybrid:bm25+{tiny}"
    fused = qmsum.run(arguments(workspace, tmp_path / "out", "bm25", tiny, hybrid, *work))
    assert loaded == []  # the model's scores are fused from --work, not measured again
    lexical = np.load(scores_path(tmp_path / "work", "bm25", "qmsum"))
    dense = np.load(scores_path(tmp_path / "whole", tiny, "qmsum"))
    answers = read_meetings(workspace / "qmsum").answers
    assert fused["results"][hybrid]["ranks"] == answer_ranks(reciprocal_rank_fusion(lexical, dense), answers)

    loaded.clear()
    with pytest.raises(UsageError) as refused:
        qmsum.run(arguments(workspace, tmp_path / "other", tiny, *work, "--overwrite"))
    assert str(refused.value) == (
        f"--work {tmp_path / 'work'} keeps the embeddings and scores of --out {(tmp_path / 'out').resolve()}; give "
        "each --out a --work of its own."
    )
    assert loaded == [] and not (tmp_path / "other").exists()  # refused before any model loads or file goes
    assert sorted(path.name for path in (tmp_path / "work").iterdir()) == ["embeddings", "scores", "work.json"]


def test_bad_requests_fail_in_one_line_before_any_model_loads(workspace, tmp_path, loaded):
    tiny = str(workspace / "tiny")
    empty = tmp_path / "empty"
    (empty / "train").mkdir(parents=True)
    longest = max(len(ids) for ids in qmsum_tokenized_queries(workspace))
    cases = {
        ("bm25", "--data", str(empty)): (
            f"--data {empty} holds no QMSum meetings (train/*.json, val/*.json); pass --data with the folder of "
            "QMSum's train and val meetings (data/ALL of the QMSum repository)."
        ),
        (f"chunk:{tiny}", "--max-tokens", "5"): (
            f"--max-tokens 5 is shorter than the longest query ({longest} tokens); give at least {longest}."
        ),
        ("bm25:snowball",): (
            "bm25:snowball: unknown BM25 tokenizer snowball; write bm25 (= bm25:english, English stopwords removed) "
            "or bm25:plain."
        ),
        (f"hybrid:bm25+chunk:{tiny}", "bm25"): (
            f"hybrid:bm25+chunk:{tiny} fuses the rankings of bm25 and chunk:{tiny}; give chunk:{tiny} among the "
            "systems too."
        ),
        (
            f"hybrid:chunk:{tiny}+bm25",
        ): f"hybrid:chunk:{tiny}+bm25: write hybrid:BM25+SYSTEM, e.g. hybrid:bm25+chunk:minilm.",
        (f"convex:0.5:bm25+chunk:{tiny}", f"chunk:{tiny}"): (
            f"convex:0.5:bm25+chunk:{tiny} fuses the scores of bm25 and chunk:{tiny}; give bm25 among the systems too."
        ),
        ("convex:1.5:bm25+minilm",): (
            "convex:1.5:bm25+minilm: write convex:W:BM25+SYSTEM, W from 0 to 1, e.g. convex:0.3:bm25+late:chunk:minilm."
        ),
        (tiny, "--max-tokens", "150"): (  # the longest meeting, cut at 150 tokens
            f"{tiny} cannot read 150 tokens: its position table holds 32 and it has no TISA. Give lengths up to 32, "
            f"or read longer documents with trunc:{tiny}, chunk:{tiny}, interp:{tiny} or a replace-mode model."
        ),
    }
    for given, message in cases.items():
        with pytest.raises(UsageError) as error:
            qmsum.run(arguments(workspace, tmp_path / "out", *given))
        assert str(error.value) == message, given
    assert loaded == [] and not (tmp_path / "out").exists()


def qmsum_tokenized_queries(workspace) -> list[list[int]]:
    from embedding_fixtures import tiny_tokenizer

    return tiny_tokenizer()(read_meetings(workspace / "qmsum").queries)["input_ids"]


def reference_best_windows(model, documents, queries, windows_of) -> np.ndarray:
    """Each query's cosine with each document's best window, from the transformers model directly."""
    from embedding_fixtures import direct_embedding

    query_vectors = torch.stack([direct_embedding(model, ids) for ids in queries])
    scores = [(query_vectors @ windows_of(document).T).max(dim=1).values for document in documents]
    return torch.stack(scores, dim=1).numpy()


def test_a_meeting_missing_a_field_is_one_line_that_keeps_its_cause():
    with pytest.raises(UsageError) as refused, reading_meeting(Path("m.json"), "queries"):
        {}["meeting_transcripts"]
    assert str(refused.value) == (
        "m.json is not a QMSum meeting (KeyError('meeting_transcripts')); it needs meeting_transcripts of "
        "{speaker, content} turns and queries."
    )
    assert isinstance(refused.value.__cause__, KeyError)


def test_the_max_readout_scores_a_document_by_its_best_window(workspace, tmp_path):
    """max:chunk: the chunks' own embeddings; max:MODEL read whole: the mean of the whole document's token states
    over the same windows (30 tokens between [CLS] and [SEP] for a 32-position table)."""
    from embedding_fixtures import direct_embedding, tiny_tokenizer
    from transformers import AutoModel

    from tisa_hf.common.long_inputs import chunks_of
    from tisa_hf.config import TisaConfig

    tiny = str(workspace / "tiny")
    chunked, whole = f"max:chunk:{tiny}", f"max:tisa:replace:2:{tiny}"
    record = qmsum.run(arguments(workspace, tmp_path / "out", chunked, whole))
    meetings = read_meetings(workspace / "qmsum")
    tokenizer = tiny_tokenizer()
    documents = [cut(ids, 200) for ids in tokenizer(meetings.documents)["input_ids"]]
    queries = tokenizer(meetings.queries)["input_ids"]

    plain = AutoModel.from_pretrained(tiny).eval()
    expected = reference_best_windows(
        plain, documents, queries, lambda ids: torch.stack([direct_embedding(plain, c) for c in chunks_of(ids, 32)])
    )
    got = np.load(scores_path(tmp_path / "out", chunked, "qmsum"))
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)

    patched = AutoModel.from_pretrained(tiny, tisa=TisaConfig(num_kernels=2, mode="replace")).eval()

    def windows_in_context(ids):
        with torch.no_grad():
            body = patched(input_ids=torch.tensor([ids])).last_hidden_state[0, 1:-1]
        return F.normalize(torch.stack([body[start : start + 30].mean(0) for start in range(0, len(body), 30)]), dim=-1)

    expected = reference_best_windows(patched, documents, queries, windows_in_context)
    got = np.load(scores_path(tmp_path / "out", whole, "qmsum"))
    np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)
    assert record["results"][whole]["ranks"] == answer_ranks(got, meetings.answers)
    windows = [-(-(len(ids) - 2) // 30) for ids in documents]
    assert record["results"][chunked]["throughput"]["vectors_per_document"] == round(float(np.mean(windows)), 1)


@pytest.mark.parametrize(
    ("readout", "owner", "method"),
    [("max", MaxScorer, "keep"), ("late", LateInteraction, "__call__")],
)
def test_an_interrupted_multi_vector_readout_resumes_with_its_rows(
    workspace, tmp_path, monkeypatch, readout, owner, method
):
    """max: keeps each document's windows (their counts in the state); late: each document's MaxSim scores."""
    system = f"{readout}:chunk:{workspace / 'tiny'}"
    whole = qmsum.run(arguments(workspace, tmp_path / "whole", system))
    real, calls = getattr(owner, method), []

    def failing(self, document):
        calls.append(len(document))
        if len(calls) == 3:
            raise KeyboardInterrupt
        return real(self, document)

    monkeypatch.setattr(owner, method, failing)
    with pytest.raises(KeyboardInterrupt):
        qmsum.run(arguments(workspace, tmp_path / "out", system))
    state = json.loads(next((tmp_path / "out" / "embeddings").glob("*.json")).read_text())
    assert state["documents"] == 2 and len(state.get("windows", [1, 1])) == 2
    monkeypatch.setattr(owner, method, real)
    resumed = qmsum.run(arguments(workspace, tmp_path / "out", system))
    np.testing.assert_array_equal(
        np.load(scores_path(tmp_path / "out", system, "qmsum")),
        np.load(scores_path(tmp_path / "whole", system, "qmsum")),
    )
    assert resumed["results"][system]["ranks"] == whole["results"][system]["ranks"]


def test_the_max_readout_is_refused_where_a_text_is_one_vector(workspace, tmp_path):
    from tisa_hf.common.spellings import MAX, parse_spelling
    from tisa_hf.embeddings.options import longembed_parser
    from tisa_hf.embeddings.retrieval.longembed import LongEmbedRetrieval

    tiny = str(workspace / "tiny")
    assert parse_spelling(f"max:chunk:{tiny}").readout is MAX
    with pytest.raises(UsageError) as error:
        parse_spelling(f"max:trunc:{tiny}")
    assert str(error.value) == (
        f"max:trunc:{tiny}: a truncated document is one window; max: reads MODEL, chunk:MODEL or interp:MODEL."
    )
    text = write_wikitext(tmp_path / "text.txt")
    args = longembed_parser().parse_args(
        [f"max:chunk:{tiny}", "--out", str(tmp_path / "le"), "--lengths", "32", "--text", str(text)]
    )
    with pytest.raises(UsageError) as error:
        LongEmbedRetrieval(args)
    assert str(error.value) == (
        f"max:chunk:{tiny}: tisa-hf longembed does not take the max: read-out; tisa-hf qmsum and tisa-hf spans do."
    )


def test_the_late_readout_scores_by_maxsim_over_token_states_and_keeps_each_documents_scores(workspace, tmp_path):
    """late:chunk: each chunk's token states, read apart; late:MODEL read whole: the whole document's; the query's
    token states likewise ([CLS] and [SEP] left out); then MaxSim. A document is kept as its scores, one a query."""
    from embedding_fixtures import tiny_tokenizer
    from transformers import AutoModel

    from tisa_hf.common.long_inputs import chunks_of
    from tisa_hf.config import TisaConfig

    tiny = str(workspace / "tiny")
    chunked, whole = f"late:chunk:{tiny}", f"late:tisa:replace:2:{tiny}"
    record = qmsum.run(arguments(workspace, tmp_path / "out", chunked, whole))
    meetings = read_meetings(workspace / "qmsum")
    tokenizer = tiny_tokenizer()
    documents = [cut(ids, 200) for ids in tokenizer(meetings.documents)["input_ids"]]
    queries = tokenizer(meetings.queries)["input_ids"]

    def token_states(model, ids):
        with torch.no_grad():
            return F.normalize(model(input_ids=torch.tensor([ids])).last_hidden_state[0, 1:-1], dim=-1)

    def maxsim(query, document):
        return (query @ document.T).max(dim=1).values.mean().item()

    plain = AutoModel.from_pretrained(tiny).eval()
    patched = AutoModel.from_pretrained(tiny, tisa=TisaConfig(num_kernels=2, mode="replace")).eval()
    for system, read in (
        (chunked, lambda ids: torch.cat([token_states(plain, chunk) for chunk in chunks_of(ids, 32)])),
        (whole, lambda ids: token_states(patched, ids)),
    ):
        document_tokens = [read(ids) for ids in documents]
        query_tokens = [read(ids) for ids in queries]
        expected = [[maxsim(query, document) for document in document_tokens] for query in query_tokens]
        got = np.load(scores_path(tmp_path / "out", system, "qmsum"))
        np.testing.assert_allclose(got, expected, rtol=0, atol=1e-5)
        kept = np.load(tmp_path / "out" / "embeddings" / f"{file_name(system)}.npy")
        np.testing.assert_array_equal(kept, got.T)
        assert record["results"][system]["ranks"] == answer_ranks(got, meetings.answers)
        tokens = round(float(np.mean([len(ids) - 2 for ids in documents])), 1)
        assert record["results"][system]["throughput"]["vectors_per_document"] == tokens


def test_measures_by_meeting_length_equal_direct_means_over_the_groups(workspace, tmp_path, monkeypatch, loaded):
    tiny, data = str(workspace / "tiny"), tmp_path / "qmsum"
    write_meetings(data, turns=(4, 8, 12, 16))
    meetings = read_meetings(data)
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    lengths = np.array([len(ids) for ids in tokenizer(meetings.documents)["input_ids"]])[meetings.answers]
    split = int(np.median(lengths)) + 1
    monkeypatch.setattr(qmsum, "LENGTH_GROUPS", (0, split))
    out = tmp_path / "out"
    argv = [f"trunc:{tiny}", "bm25", "--out", str(out), "--data", str(data), "--max-tokens", "400"]
    assert qmsum.main([*argv, "--bootstrap", "200"]) == 0
    record = json.loads((out / "qmsum.json").read_text())
    assert record["settings"]["document_tokens"]["per_query"] == lengths.tolist()
    groups = record["by_length"]
    assert list(groups) == [f"0-{split:,} tokens", f"{split:,}+ tokens"]
    for name, inside in zip(groups, (lengths < split, lengths >= split), strict=True):
        assert groups[name]["queries"] == int(inside.sum()) > 0
        for system, result in record["results"].items():
            expected = np.asarray(per_query("ndcg_at_10", result["ranks"]))[inside].mean()
            assert groups[name]["systems"][system]["ndcg_at_10"] == pytest.approx(expected)
    assert "nDCG@10 x100 by the length of the query's meeting (queries)" in (out / "qmsum.md").read_text()
