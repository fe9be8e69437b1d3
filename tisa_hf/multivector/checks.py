"""What `tisa-hf index` and `tisa-hf search` check before anything loads, from files alone (no torch): the command
line runs these before it imports torch (`commands/cli.py`), so that a bad path or line is one line at once, and
the commands run them again first thing, for callers in Python."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from ..common.result_files import check_out_folder
from ..embeddings.corpus_files import CorpusFile, read_corpus, read_documents
from ..embeddings.ray_cluster import check_engine
from ..errors import UsageError
from .compression import check_pq_dimension
from .index_folder import INDEX_FILE, check_multi_vector_folder, finished_index, is_index_model, model_dimension


def check_index_files(args: argparse.Namespace) -> CorpusFile:
    """`tisa-hf index`'s engine options first (as the command does), then --out, model folder (and its vectors'
    length against a pqM --dtype) and --input, read."""
    check_engine(args)
    check_out_folder(args.out)
    check_pq_dimension(args.dtype, model_dimension(check_multi_vector_folder(args.model)))
    return read_corpus(args.input, args.text_field, with_ids=True, id_field=args.id_field)


def check_search_files(args: argparse.Namespace) -> tuple[dict[str, Any], list[str], Path]:
    """`tisa-hf search`'s --out, index, queries, candidate stage and model: the index's record, the queries and
    the model's folder."""
    check_out_file(args.out)
    record = finished_index(args.index)
    queries = read_queries(args)
    check_stages(args, record)
    return record, queries, check_model(args, record)


def check_out_file(out: str | None) -> None:
    if out is not None and Path(out).is_dir():
        raise UsageError(f"--out {out} is a folder; give a JSON file.")


def read_queries(args: argparse.Namespace) -> list[str]:
    if args.query is not None:
        if not args.query.strip():
            raise UsageError("--query is empty; give it some words.")
        return [args.query]
    return read_documents(args.queries, args.query_field, "--queries", "--query-field", "query")


def check_stages(args: argparse.Namespace, record: dict[str, Any]) -> None:
    """The candidate stage asked for can run on this index, and gives at least --top-k documents."""
    if args.candidates is not None and args.candidates < args.top_k:
        raise UsageError(
            f"--candidates {args.candidates} is fewer than --top-k {args.top_k}; ask for at least as many candidates."
        )
    if args.candidate_stage == "tokens" and not record["settings"].get("token_centroids"):
        raise UsageError(
            f"{args.index} has no token candidate stage; rebuild it with tisa-hf index --token-centroids 4096, or "
            "use --candidate-stage bm25."
        )


def check_model(args: argparse.Namespace, record: dict[str, Any]) -> Path:
    """The index's model folder (--model where it has moved), holding the weights and settings that built it."""
    named = record["settings"]["model"]
    if args.model is None and not Path(named).exists():
        raise UsageError(
            f"{named}, the model folder {Path(args.index) / INDEX_FILE} names, is gone (moved or deleted); give "
            "where it is now with --model."
        )
    folder = check_multi_vector_folder(args.model or named)
    if not is_index_model(folder, record):
        raise UsageError(
            f"{folder} is not the model {Path(args.index) / INDEX_FILE} was built with (its weights or settings "
            "differ); search with that model, or rebuild the index with this one."
        )
    return folder
