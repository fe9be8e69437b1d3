"""`tisa-hf search`: the top-k documents of a `tisa-hf index` for one query or a file of queries, by exact mean
MaxSim, written as JSON.

Everything is checked before the model loads: the index is there and finished, the queries are read (a file as
`tisa-hf encode` reads a corpus, the query under --query-field), and the model is the one that built the index (its
fingerprint in `index.json`). The queries are encoded by the index's `MultiVectorEncoder` and scored against the
documents' stored vectors (memory-mapped, read a document at a time) by the `late:` read-out's MaxSim
(`embeddings/retrieval/ranking.py`): every document, or with --candidates N only each query's N best by BM25 (the
index's `bm25/`), which costs N documents' products a query instead of the corpus'. Ties rank the earlier document
first.
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
from ..embeddings.encode import read_documents
from ..embeddings.lexical import query_scores
from ..embeddings.retrieval.ranking import LateInteraction
from ..errors import UsageError
from .index_folder import (
    BM25_FOLDER,
    BM25_TOKENIZER,
    INDEX_FILE,
    StoredVectors,
    check_multi_vector_folder,
    finished_index,
    model_fingerprint,
)
from .options import search_parser


def read_queries(args: argparse.Namespace) -> list[str]:
    if args.query is not None:
        if not args.query.strip():
            raise UsageError("--query is empty; give it some words.")
        return [args.query]
    return read_documents(args.queries, args.query_field, "--queries", "--query-field", "query")


def check_model(args: argparse.Namespace, record: dict[str, Any]) -> Path:
    """The index's model folder (--model where it has moved), holding the weights and settings that built it."""
    folder = check_multi_vector_folder(args.model or record["settings"]["model"])
    if model_fingerprint(folder) != record["settings"]["model_sha256"]:
        raise UsageError(
            f"{folder} is not the model {Path(args.index) / INDEX_FILE} was built with (its weights or settings "
            "differ); search with that model, or rebuild the index with this one."
        )
    return folder


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


def load_bm25(index: str):
    """The index's BM25 (bm25s) over the documents' text."""
    import bm25s

    return bm25s.BM25.load(str(Path(index) / BM25_FOLDER))


def bm25_candidates(bm25, queries: list[str], documents: int, count: int) -> np.ndarray:
    """(queries, count): each query's `count` best of the `documents` documents by BM25."""
    return top_documents(query_scores(bm25, queries, BM25_TOKENIZER, documents), count)


def run(args: argparse.Namespace) -> dict[str, Any]:
    check_out_file(args.out)
    record = finished_index(args.index)
    queries = read_queries(args)
    if args.candidates is not None and args.candidates < args.top_k:
        raise UsageError(
            f"--candidates {args.candidates} is fewer than --top-k {args.top_k}; ask for at least as many candidates."
        )
    model_folder = check_model(args, record)
    require_sentence_transformers()
    from sentence_transformers import MultiVectorEncoder

    device = checked_device(args.device or "cpu")
    started = time.perf_counter()
    model = MultiVectorEncoder(str(model_folder), device=str(device))
    loaded = time.perf_counter()
    stored = StoredVectors(args.index, record)
    vectors = model.encode_query(queries, convert_to_numpy=True, show_progress_bar=False)
    products_on = None if device.type == "cpu" else device  # LateInteraction: numpy on the CPU
    if args.candidates is None:
        scores = exact_scores(vectors, stored, products_on)
    else:
        candidates = bm25_candidates(load_bm25(args.index), queries, len(stored), args.candidates)
        scores = candidate_scores(vectors, candidates, stored, products_on)
    top = top_documents(scores, args.top_k)
    searched = time.perf_counter()
    return {
        "index": str(args.index),
        "model": str(model_folder),
        "similarity": record["similarity"],
        "candidates": args.candidates,
        "top_k": args.top_k,
        "seconds_a_query": round((searched - loaded) / len(queries), 4),
        "model_load_s": round(loaded - started, 2),
        "results": [
            {
                "query": query,
                "hits": [{"document": int(document), "score": float(scores[row, document])} for document in best],
            }
            for row, (query, best) in enumerate(zip(queries, top, strict=True))
        ],
    }


def check_out_file(out: str | None) -> None:
    if out is not None and Path(out).is_dir():
        raise UsageError(f"--out {out} is a folder; give a JSON file.")


def main(argv: list[str] | None = None) -> int:
    args = search_parser().parse_args(sys.argv[1:] if argv is None else argv)
    results = run(args)
    if args.out is None:
        print(json.dumps(results, indent=2))
    else:
        write_record(results, Path(args.out))
    return 0
