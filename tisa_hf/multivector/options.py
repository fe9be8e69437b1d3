"""The options of `tisa-hf index` and `tisa-hf search`; light (argparse and tisa_hf's light modules only), so that
`--help` answers without importing torch."""

from __future__ import annotations

import argparse

from ..common.options import add_device_argument, positive_int
from ..embeddings.options import add_encoding_arguments, new_parser
from .compression import DTYPES


def index_parser() -> argparse.ArgumentParser:
    parser = new_parser(
        "tisa-hf index",
        "Turn a corpus into a token-vector index for tisa-hf search: one fp16 vector a token of each document, read "
        "by a multi-vector model, in parts saved as they finish (an interrupted run resumes), on one device or "
        "several processes.",
    )
    parser.add_argument(
        "model", help="A MultiVectorEncoder folder (tisa-hf adapt --multi-vector, or save_multi_vector_encoder)."
    )
    add_encoding_arguments(parser, "Folder of the index: index.json, offsets.npy and shards/.")
    parser.add_argument(
        "--dtype",
        choices=DTYPES,
        default=DTYPES[0],
        help="How a token vector is stored: float16 (2 bytes a number) or int8 (1 byte a number and a float32 scale "
        "a token).",
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
        help="Score only each query's N best documents by BM25 (the index's text, English stopwords removed) by "
        "MaxSim, instead of every document (default: every document).",
    )
    parser.add_argument(
        "--model",
        help="The index's MultiVectorEncoder folder where it has moved (default: the one index.json names); its "
        "weights and settings must be those the index was built with.",
    )
    add_device_argument(parser, "Device the queries are encoded and scored on (default: cpu).")
    parser.add_argument("--out", help="JSON file of the results (default: printed).")
    return parser
