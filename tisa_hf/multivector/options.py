"""The options of `tisa-hf index` and `tisa-hf search`; light (argparse and tisa_hf's light modules only), so that
`--help` answers without importing torch."""

from __future__ import annotations

import argparse

from ..common.options import add_device_argument, positive_int
from ..embeddings.lexical import fusion_weight
from ..embeddings.options import add_encoding_arguments, new_parser
from .compression import DTYPES, is_dtype


def unit_interval(text: str) -> float:
    """An argparse type: a number from 0 to 1 (a fusion's weight)."""
    weight = fusion_weight(text)
    if weight is None:
        raise argparse.ArgumentTypeError(f"expected a number from 0 to 1, got {text!r}")
    return weight


def dtype(text: str) -> str:
    """An argparse type: a storage `compression.py` knows."""
    if not is_dtype(text):
        raise argparse.ArgumentTypeError(f"write float16, int8 or pqM (M bytes a token), got {text!r}")
    return text


def index_parser() -> argparse.ArgumentParser:
    parser = new_parser(
        "tisa-hf index",
        "Turn a corpus into a token-vector index for tisa-hf search: one vector a token of each document (stored "
        "as --dtype says: float16, int8 or product-quantized), read by a multi-vector model, in parts saved as "
        "they finish (an interrupted run resumes), on one device or several processes.",
    )
    parser.add_argument(
        "model", help="A MultiVectorEncoder folder (tisa-hf adapt --multi-vector, or save_multi_vector_encoder)."
    )
    add_encoding_arguments(parser, "Folder of the index: index.json, offsets.npy and shards/.")
    parser.add_argument(
        "--id-field",
        help="The field holding a .jsonl object's own id, which tisa-hf search gives back beside the document's line "
        "(default: id, when the first object has one).",
    )
    parser.add_argument(
        "--dtype",
        type=dtype,
        default=DTYPES[0],
        metavar="{" + ",".join(DTYPES) + "}",
        help="How a token vector is stored: float16 (2 bytes a number), int8 (1 byte a number and a float32 scale "
        "a token) or pqM, product quantization by faiss (M bytes a token: M sub-vectors, each one of 256 centroids "
        "learned from the first part; pq64 for MiniLM's 384 numbers).",
    )
    parser.add_argument(
        "--token-centroids",
        type=positive_int,
        help="Also build the approximate candidate stage over token vectors for tisa-hf search --candidate-stage "
        "tokens: at most this many k-means centroids (faiss) learned from the first part, 40 token vectors a "
        "centroid (4096 is a fair start; default: none built).",
    )
    return parser


def search_parser() -> argparse.ArgumentParser:
    parser = new_parser(
        "tisa-hf search",
        "Search a tisa-hf index by exact MaxSim (mean over the query's tokens, the late: read-out): the top-k "
        "documents of one query or of a file of queries, with their scores, as JSON.",
    )
    parser.add_argument("index", help="The folder tisa-hf index wrote.")
    asked = parser.add_mutually_exclusive_group(required=True)
    asked.add_argument("--query", help="One query.")
    asked.add_argument("--queries", help="A .jsonl file (one object a line) or a text file (one query a line).")
    parser.add_argument("--query-field", default="text", help="The field holding a .jsonl object's query.")
    parser.add_argument("--top-k", type=positive_int, default=10, help="Documents listed a query.")
    parser.add_argument(
        "--candidates",
        type=positive_int,
        metavar="N",
        help="Score by MaxSim only each query's N best documents by the candidate stage, instead of every document "
        "(default: every document).",
    )
    parser.add_argument(
        "--candidate-stage",
        choices=("bm25", "tokens"),
        default="bm25",
        help="How --candidates are found: bm25, BM25 on the index's text (English stopwords removed); tokens, the "
        "approximate search over token vectors the index was built with (tisa-hf index --token-centroids).",
    )
    parser.add_argument(
        "--probes",
        type=positive_int,
        default=8,
        help="--candidate-stage tokens: the centroids each query token looks in.",
    )
    parser.add_argument(
        "--fuse",
        type=unit_interval,
        metavar="W",
        help="Rank by convex fusion instead of MaxSim alone: W times the MaxSim scores plus 1 - W times BM25's, "
        "each min-max normalised over the query's scored documents (the convex:W:BM25+SYSTEM system of the "
        "retrieval commands).",
    )
    parser.add_argument(
        "--model",
        help="The index's MultiVectorEncoder folder where it has moved (default: the one index.json names); its "
        "weights and settings must be those the index was built with.",
    )
    add_device_argument(parser, "Device the queries are encoded and scored on (default: cpu).")
    parser.add_argument("--out", help="JSON file of the results (default: printed).")
    return parser
