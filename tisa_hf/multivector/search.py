"""`tisa-hf search`: the top-k documents of a `tisa-hf index` for one query or a file of queries, by exact mean
MaxSim, written as JSON.

Everything is checked before the model loads: the index is there and finished, the queries are read (a file as
`tisa-hf encode` reads a corpus, the query under --query-field), and the model is the one that built the index (its
fingerprint in `index.json`). The queries are encoded by the index's `MultiVectorEncoder` and scored against every
document's stored vectors by the `late:` read-out's MaxSim (`embeddings/retrieval/ranking.py`), one document at a
time, so that memory holds one shard; ties rank the earlier document first.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from ..common.result_files import write_record
from ..common.sentence_models import require_sentence_transformers
from ..embeddings.corpus import read_documents
from ..embeddings.retrieval.ranking import LateInteraction
from ..errors import UsageError
from .index_folder import INDEX_FILE, check_multi_vector_folder, document_vectors, finished_index, model_fingerprint
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


def run(args: argparse.Namespace) -> dict[str, Any]:
    record = finished_index(args.index)
    queries = read_queries(args)
    model_folder = check_model(args, record)
    require_sentence_transformers()
    from sentence_transformers import MultiVectorEncoder

    started = time.perf_counter()
    model = MultiVectorEncoder(str(model_folder), device=args.device or "cpu")
    loaded = time.perf_counter()
    late = LateInteraction(model.encode_query(queries, convert_to_numpy=True, show_progress_bar=False))
    scores = np.stack([late(vectors.astype(np.float32)) for vectors in document_vectors(args.index, record)], axis=1)
    top = top_documents(scores, args.top_k)
    searched = time.perf_counter()
    return {
        "index": str(args.index),
        "model": str(model_folder),
        "similarity": record["similarity"],
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


def main(argv: list[str] | None = None) -> int:
    args = search_parser().parse_args(sys.argv[1:] if argv is None else argv)
    if args.out is not None and Path(args.out).is_dir():
        raise UsageError(f"--out {args.out} is a folder; give a JSON file.")
    results = run(args)
    if args.out is None:
        print(json.dumps(results, indent=2))
    else:
        write_record(results, Path(args.out))
    return 0
