"""`tisa-hf search`: the top-k documents of a `tisa-hf index` for one query or a file of queries, by exact mean
MaxSim, written as JSON.

Everything is checked before the model loads (`checks.py`, before torch is imported on the command line): the index is
there and finished, the queries are read (a file as `tisa-hf encode` reads a corpus, the query under --query-field),
the candidate stage asked for is the index's, and the model is the one that built the index (its files as `index.json`
recorded them, or else its fingerprint). The queries are encoded by the index's `MultiVectorEncoder` and scored
against the documents' stored vectors (memory-mapped, read a document at a time) by the `late:` read-out's MaxSim
(`embeddings/retrieval/ranking.py`): every document, or with --candidates N only each query's N best by the candidate
stage, BM25 (the index's `bm25/`) or the approximate search over token vectors (`token_candidates.py`), which costs N
documents' products a query instead of the corpus'. With --fuse W, the MaxSim scores are fused with BM25's (convex
fusion, `ranking.py`). Ties rank the earlier document first. A hit names its document by its line in the corpus file
and, where the corpus gave ids (`tisa-hf index --id-field`), by its id.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
import torch

from ..common.machine import checked_device
from ..common.result_files import write_record
from ..common.sentence_models import require_sentence_transformers
from ..embeddings.lexical import query_scores
from ..embeddings.retrieval.ranking import LateInteraction, convex_fusion
from .checks import check_search_files
from .index_folder import BM25_FOLDER, BM25_TOKENIZER, StoredVectors, centroids_path, postings_path, stored_ids
from .options import search_parser
from .token_candidates import Postings, approximate_scores


def encode_queries(model, queries: list[str]) -> list[np.ndarray]:
    """The queries' token vectors; on the CPU in one torch thread, the caller's setting restored: a query is a few
    dozen tokens, products too small for threads to share, and on cores busy with other work two threads wait on
    each other (a QMSum summary took 757 ms on two threads against 54 ms on one, medians of 10, 2-core VM at load
    6-7; docs/results-longdoc.md)."""
    threads = torch.get_num_threads()
    if model.device.type == "cpu":
        torch.set_num_threads(1)
    try:
        return model.encode_query(queries, convert_to_numpy=True, show_progress_bar=False)
    finally:
        torch.set_num_threads(threads)


def top_documents(scores: np.ndarray, top_k: int) -> np.ndarray:
    """(queries, k): each query's k best documents, best first, the earlier document first among ties."""
    return np.argsort(-scores, axis=1, kind="stable")[:, :top_k]


def exact_scores(queries: list[np.ndarray], stored: Sequence[np.ndarray], device: torch.device | None) -> np.ndarray:
    """(queries, documents): every query against every document."""
    late = LateInteraction(queries, device)
    return np.stack([late(stored[document]) for document in range(len(stored))], axis=1)


def candidate_scores(
    queries: list[np.ndarray], candidates: np.ndarray, stored: Sequence[np.ndarray], device: torch.device | None
) -> np.ndarray:
    """(queries, documents): each query against its `candidates` row of documents only, -inf elsewhere; a document
    is read once, against the queries that have it as a candidate."""
    scores = np.full((len(queries), len(stored)), -np.inf)
    for document in np.unique(candidates):
        rows = np.flatnonzero((candidates == document).any(axis=1))
        late = LateInteraction([queries[row] for row in rows], device)
        scores[rows, document] = late(stored[document])
    return scores


def hit(document: int, score: float, ids: list[str | int] | None) -> dict[str, Any]:
    """A document found: its line in the corpus file (1-based, as editors and `sed -n` count) and, where the
    corpus gave ids, its id."""
    return {"line": document + 1, **({} if ids is None else {"id": ids[document]}), "score": score}


def load_bm25(index: str):
    """The index's BM25 (bm25s) over the documents' text."""
    import bm25s

    return bm25s.BM25.load(str(Path(index) / BM25_FOLDER))


def run(args: argparse.Namespace) -> dict[str, Any]:
    record, queries, model_folder = check_search_files(args)
    require_sentence_transformers()
    from sentence_transformers import MultiVectorEncoder

    device = checked_device(args.device or "cpu")
    started = time.perf_counter()
    model = MultiVectorEncoder(str(model_folder), device=str(device))
    stored = StoredVectors(args.index, record)
    bm25 = load_bm25(args.index) if args.candidate_stage == "bm25" or args.fuse is not None else None
    stage = TokenStage(args.index, record, args.probes) if args.candidate_stage == "tokens" else None
    loaded = time.perf_counter()
    vectors = encode_queries(model, queries)
    encoded = time.perf_counter()
    products_on = None if device.type == "cpu" else device  # LateInteraction: numpy on the CPU
    lexical = None if bm25 is None else query_scores(bm25, queries, BM25_TOKENIZER, len(stored))
    if args.candidates is None:
        chosen = time.perf_counter()
        scores = exact_scores(vectors, stored, products_on)
    else:
        candidates = (
            top_documents(lexical, args.candidates)
            if stage is None
            else np.stack([stage.candidates(query, args.candidates) for query in vectors])
        )
        chosen = time.perf_counter()
        scores = candidate_scores(vectors, candidates, stored, products_on)
    if args.fuse is not None:
        scores = convex_fusion(np.where(np.isfinite(scores), lexical, -np.inf), scores, args.fuse)
    top = top_documents(scores, args.top_k)
    searched = time.perf_counter()
    ids = stored_ids(args.index)
    return {
        "index": str(args.index),
        "model": str(model_folder),
        "similarity": record["similarity"],
        "candidates": args.candidates,
        "candidate_stage": None if args.candidates is None else args.candidate_stage,
        "fuse": args.fuse,
        "top_k": args.top_k,
        "seconds_a_query": round((searched - loaded) / len(queries), 4),
        "seconds": {
            "load": round(loaded - started, 2),
            "encode_queries": round(encoded - loaded, 4),
            "candidates": round(chosen - encoded, 4),
            "maxsim": round(searched - chosen, 4),
        },
        "results": [
            {
                "query": query,
                "hits": [hit(int(document), float(scores[row, document]), ids) for document in best],
            }
            for row, (query, best) in enumerate(zip(queries, top, strict=True))
        ],
    }


class TokenStage:
    """The index's approximate candidate stage over token vectors (`token_candidates.py`), loaded once."""

    def __init__(self, index: str, record: dict[str, Any], probes: int) -> None:
        out = Path(index)
        self.centroids = np.load(centroids_path(out))
        self.postings = Postings(np.load(postings_path(out, "starts")), np.load(postings_path(out, "documents")))
        self.documents, self.probes = record["documents"], min(probes, len(self.centroids))

    def candidates(self, query: np.ndarray, count: int) -> np.ndarray:
        """(count,): the documents of the best approximate scores, the earlier first among ties."""
        approximate = approximate_scores(query, self.centroids, self.postings, self.documents, self.probes)
        return top_documents(approximate[None], count)[0]


def main(argv: list[str] | None = None) -> int:
    args = search_parser().parse_args(sys.argv[1:] if argv is None else argv)
    results = run(args)
    if args.out is None:
        print(json.dumps(results, indent=2))
    else:
        write_record(results, Path(args.out))
        hits = sum(len(result["hits"]) for result in results["results"])
        queries = len(results["results"])
        print(
            f"{hits} hits of {queries} quer{'y' if queries == 1 else 'ies'} (top {args.top_k}) written to {args.out}."
        )
    return 0
