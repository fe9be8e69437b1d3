"""The retrieval runner's scoring, shared by every retrieval task: a system scores one set of documents against the
queries asked of them (a `Cell`), and its scores are kept in WORK/scores/ (--work, by default --out) for hybrids
and reruns.

BM25 reads the documents' text; a model system reads their token ids through its read-out's scorer
(`readouts.py`), keeping each document's rows as they are made where a run resumes (`kept_embeddings.py`); a
hybrid fuses its parts' kept scores (`ranking.py`). A task says which cells there are and what it measures of the
scores.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ...common.result_files import save_array, scores_path
from ..lexical import bm25_scores
from ..systems import Embedder, HybridSpec, LexicalSpec, RetrievalSystem
from .kept_embeddings import embed_documents
from .ranking import convex_fusion, reciprocal_rank_fusion
from .readouts import Scorer, scorer_for


@dataclass(frozen=True)
class Cell:
    """One set of documents and the queries asked of them, as every system of a run scores them: `name` (the file
    of its scores under WORK/scores/SYSTEM/), the documents' token ids, the candidates' text (BM25's; `document_texts`
    gives them when asked), and the queries' token ids and text.

    The candidates are the documents, or with a `window` the documents' windows of that many tokens in order
    (`readouts.py`). With `candidates`, each query ranks only its own (columns of the scores): every system's
    scores elsewhere are -inf, so that a hybrid fuses the ranks among a query's own candidates."""

    name: str
    documents: list[list[int]]
    query_ids: list[list[int]]
    queries: list[str]
    document_texts: Callable[[], list[str]]
    window: int | None = None
    candidates: list[range] | None = None


@dataclass(frozen=True)
class Keeping:
    """Where a model system keeps a cell's document rows as they are made (`kept_embeddings.py`): the folder, the
    file name, and the fingerprint of the tokens they are made of (rows of other tokens are not resumed)."""

    folder: Path
    name: str
    fingerprint: str


@dataclass
class Scored:
    """A system's scores of a cell (queries x documents), with, for a model system, its scorer and what its kept
    rows cost (`embed_documents`' totals; None where they were not kept)."""

    scores: np.ndarray
    scorer: Scorer | None = None
    kept: dict[str, Any] | None = None


def score(
    system: RetrievalSystem,
    cell: Cell,
    work: Path,
    embedder: Embedder | None = None,
    keeping: Keeping | None = None,
    torch_products: bool = False,
    progress: str | None = None,
) -> Scored:
    """The system's scores of the cell, saved in WORK/scores/ (a model system needs its loaded `embedder`; a hybrid,
    its parts' saved scores)."""
    if isinstance(system, LexicalSpec):
        scored = Scored(bm25_scores(cell.document_texts(), cell.queries, system.tokenizer))
    elif isinstance(system, HybridSpec):
        lexical, dense = (np.load(scores_path(work, part, cell.name)) for part in (system.lexical, system.dense))
        if system.weight is None:
            scored = Scored(reciprocal_rank_fusion(lexical, dense))
        else:
            scored = Scored(convex_fusion(lexical, dense, system.weight))
    else:
        scorer = scorer_for(embedder, cell.query_ids, torch_products, cell.window)
        if keeping is None:
            scored = Scored(scorer.scores(*scorer.keep_all(cell.documents, progress)), scorer)
        else:
            kept = embed_documents(scorer.keep, cell.documents, keeping.folder, keeping.name, keeping.fingerprint)
            scored = Scored(scorer.scores(kept["embeddings"], kept["windows"]), scorer, kept)
    if cell.candidates is not None:
        scored.scores = among_candidates(scored.scores, cell.candidates)
    save_array(scores_path(work, system.spec, cell.name), scored.scores)
    return scored


def among_candidates(scores: np.ndarray, candidates: list[range]) -> np.ndarray:
    """`scores` where each query's row keeps its candidates' columns and is -inf elsewhere."""
    kept = np.full(np.shape(scores), -np.inf, dtype=np.asarray(scores).dtype)
    for query, columns in enumerate(candidates):
        kept[query, columns] = scores[query, columns]
    return kept


def ordered(systems: list[RetrievalSystem]) -> list[RetrievalSystem]:
    """The systems in the given order, hybrids last (they fuse the others' scores)."""
    return sorted(systems, key=lambda system: isinstance(system, HybridSpec))


def pending_cells(
    systems: list[RetrievalSystem], cells: list[str], measured: Callable[[str, str], bool], work: Path
) -> dict[str, list[str]]:
    """Per system, the cells (by name) to score: those `measured` says have no result, and those whose scores a
    hybrid still to be measured needs and WORK/scores/ lacks (a record from before scores were kept, say)."""
    pending = {system.spec: [cell for cell in cells if not measured(system.spec, cell)] for system in systems}
    for system in systems:
        if isinstance(system, HybridSpec):
            for part in (system.lexical, system.dense):
                pending[part] += [
                    cell
                    for cell in pending[system.spec]
                    if cell not in pending[part] and not scores_path(work, part, cell).is_file()
                ]
    return pending


def system_facts(system: RetrievalSystem) -> dict[str, Any]:
    """What a record says of a system."""
    if isinstance(system, LexicalSpec):
        return {"model": None, "reading": "bm25", "tokenizer": system.tokenizer}
    if isinstance(system, HybridSpec):
        fusion = {"reading": "hybrid", "fuses": [system.lexical, system.dense]}
        return {"model": None, **fusion} | ({} if system.weight is None else {"weight": system.weight})
    return {
        "model": system.facts.path,
        "reading": system.reading.name,
        "tisa": system.effective_tisa.to_dict() if system.effective_tisa else None,
        "position_table_length": system.table_length,
    }
