"""The grammar of systems (`common/spellings.py`): spellings print back as spelled, parts out of order are refused
in one line, a hybrid splits after its BM25 part, every read-out has its scorer, and the docs' table and `--help`
are written from the registry."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tisa_hf.common.spellings import CHUNK, INTERP, LATE, MAX, MEAN, READOUTS, TRUNC, WHOLE, parse_spelling
from tisa_hf.config import TisaConfig
from tisa_hf.embeddings.lexical import split_hybrid
from tisa_hf.embeddings.options import READOUTS_TAKEN, passages_parser, qmsum_parser, sts_parser, systems_table
from tisa_hf.errors import UsageError

DOCS = Path(__file__).resolve().parents[1] / "docs" / "long-documents.md"
GRAMMAR = "[max:|late:][trunc:|chunk:|interp:]MODEL or [max:|late:]tisa:MODE:S:MODEL"


@pytest.mark.parametrize(
    ("spec", "parts"),
    [
        ("minilm", ("minilm", WHOLE, MEAN, None)),
        ("trunc:runs/a+b", ("runs/a+b", TRUNC, MEAN, None)),
        ("max:chunk:minilm", ("minilm", CHUNK, MAX, None)),
        ("late:interp:org/model", ("org/model", INTERP, LATE, None)),
        ("late:trunc:minilm", ("minilm", TRUNC, LATE, None)),
        ("tisa:replace:5:minilm", ("minilm", WHOLE, MEAN, TisaConfig(num_kernels=5, mode="replace"))),
        ("max:tisa:add:2:folder", ("folder", WHOLE, MAX, TisaConfig(num_kernels=2, mode="add"))),
    ],
)
def test_a_spelling_keeps_its_parts_and_prints_back_as_spelled(spec, parts):
    spelling = parse_spelling(spec)
    assert (spelling.model, spelling.reading, spelling.readout, spelling.tisa) == parts
    assert str(spelling) == spec


@pytest.mark.parametrize(
    ("spec", "misplaced"),
    [
        ("chunk:tisa:add:5:minilm", "tisa:"),
        ("trunc:late:minilm", "late:"),
        ("trunc:max:minilm", "max:"),
        ("late:max:minilm", "max:"),
        ("interp:chunk:minilm", "chunk:"),
    ],
)
def test_a_part_out_of_order_is_refused_in_one_line(spec, misplaced):
    with pytest.raises(UsageError) as error:
        parse_spelling(spec)
    assert str(error.value) == f"{spec}: {misplaced} is out of place; a system is spelled {GRAMMAR}, in that order."


def test_a_readout_refuses_the_readings_it_does_not_take_and_other_mistakes():
    with pytest.raises(UsageError) as error:
        parse_spelling("max:trunc:minilm")
    assert str(error.value) == (
        "max:trunc:minilm: a truncated document is one window; max: reads MODEL, chunk:MODEL or interp:MODEL."
    )
    with pytest.raises(UsageError) as error:
        parse_spelling("tisa:sideways:2:minilm")
    assert (
        str(error.value) == "tisa:sideways:2:minilm: write tisa:MODE:S:MODEL, MODE add or replace and S a whole number."
    )


def test_longer_readings_keep_the_readout_and_the_readings_it_takes():
    assert parse_spelling("late:minilm").longer_readings() == [
        "late:trunc:minilm",
        "late:chunk:minilm",
        "late:interp:minilm",
    ]
    assert parse_spelling("max:minilm").longer_readings() == ["max:chunk:minilm", "max:interp:minilm"]
    assert parse_spelling("tisa:add:2:minilm").longer_readings() == ["trunc:minilm", "chunk:minilm", "interp:minilm"]


def test_a_hybrid_splits_after_its_bm25_part_so_a_model_name_may_hold_a_plus():
    assert split_hybrid("hybrid:bm25+chunk:runs/a+b") == ("bm25", "chunk:runs/a+b", None)
    assert split_hybrid("hybrid:bm25:plain+late:minilm") == ("bm25:plain", "late:minilm", None)
    assert split_hybrid("convex:0.25:bm25+late:runs/a+b") == ("bm25", "late:runs/a+b", 0.25)
    assert split_hybrid("convex:1:bm25:plain+minilm") == ("bm25:plain", "minilm", 1.0)
    assert split_hybrid("chunk:minilm") is None
    with pytest.raises(UsageError) as error:
        split_hybrid("hybrid:chunk:minilm+bm25")
    assert str(error.value) == "hybrid:chunk:minilm+bm25: write hybrid:BM25+SYSTEM, e.g. hybrid:bm25+chunk:minilm."
    convex_form = "write convex:W:BM25+SYSTEM, W from 0 to 1, e.g. convex:0.3:bm25+late:chunk:minilm."
    for spec in ("convex:bm25+minilm", "convex:-0.1:bm25+minilm", "convex:0.5:minilm+bm25", "convex:nan:bm25+x"):
        with pytest.raises(UsageError) as error:
            split_hybrid(spec)
        assert str(error.value) == f"{spec}: {convex_form}", spec


def test_min_max_and_convex_fusion_keep_non_candidates_out():
    from tisa_hf.embeddings.retrieval.ranking import convex_fusion, min_max

    scores = np.array([[2.0, 4.0, -np.inf, 3.0], [5.0, 5.0, 5.0, 5.0]])
    np.testing.assert_array_equal(min_max(scores), [[0.0, 1.0, -np.inf, 0.5], [0.0, 0.0, 0.0, 0.0]])
    lexical = np.array([[10.0, 0.0, 5.0]])
    dense = np.array([[0.1, 0.3, 0.2]])
    np.testing.assert_allclose(convex_fusion(lexical, dense, 0.25), [[0.75, 0.25, 0.5]])
    np.testing.assert_allclose(convex_fusion(lexical, dense, 0.0), min_max(lexical))
    among = np.array([[1.0, -np.inf, 3.0]])
    for weight in (0.0, 0.5, 1.0):  # no 0 x inf: a document out of the candidates stays out at either end
        np.testing.assert_array_equal(convex_fusion(among, among, weight), [[0.0, -np.inf, 1.0]])


def test_every_readout_has_its_scorer():
    pytest.importorskip("sentence_transformers")
    from tisa_hf.embeddings.retrieval.readouts import SCORERS

    assert {name: scorer.readout for name, scorer in SCORERS.items()} == {r.name: r for r in READOUTS}


def test_the_docs_table_and_help_are_written_from_the_registry():
    assert systems_table() in DOCS.read_text()
    for readout in READOUTS:
        assert (f"`{readout.prefix}SYSTEM` | {readout.help} |" in systems_table()) == bool(readout.prefix)
    qmsum_help = " ".join(qmsum_parser().format_help().split())
    sts_help = " ".join(sts_parser().format_help().split())
    assert f"Systems, spelled {GRAMMAR}" in qmsum_help and f"late:SYSTEM ({LATE.help})" in qmsum_help
    assert "late:SYSTEM" not in sts_help and "bm25" not in sts_help and READOUTS_TAKEN["tisa-hf sts"] == (MEAN,)


def test_the_table_and_help_leave_out_the_reading_the_passage_task_refuses():
    """qmsum-passages refuses trunc: (tests/test_qmsum_passages.py holds its refusal); the table and its help say so."""
    trunc_row = f"| `trunc:MODEL` | {TRUNC.help} | longembed, qmsum, spans, sts |"
    assert trunc_row in systems_table().splitlines()
    passages_help = " ".join(passages_parser().format_help().split())
    assert "chunk:MODEL (chunks" in passages_help and "trunc:MODEL (" not in passages_help
    assert "trunc:MODEL (" in " ".join(qmsum_parser().format_help().split())
