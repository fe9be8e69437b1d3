"""The options of `tisa-hf context-train`; light (argparse and tisa_hf's light modules only), so that `--help`
answers without importing torch. Its training settings are those of sentence-transformers' trainer it runs
(`SentenceTransformerTrainingArguments`), under the names `tisa-hf adapt` gives them."""

from __future__ import annotations

import argparse

from ..common.hub_access import WIKITEXT_HELP
from ..common.options import add_overwrite_argument, positive_float, positive_int
from ..embeddings.options import add_query_arguments, new_parser

NEGATIVES = ("in-batch", "in-sequence")
QUERIES = ("titled", "plain")


def context_train_parser() -> argparse.ArgumentParser:
    parser = new_parser(
        "tisa-hf context-train",
        "Train an embedding model so that whole-document context pays: each document is read whole, each of its "
        "windows pooled from that read (late chunking), and each window's query must find it among the other "
        "windows of its document (in-sequence negatives) and of the batch's documents (InSeNT-style contrastive "
        "training, with sentence-transformers' SentenceTransformerTrainer). Interrupted runs resume.",
    )
    parser.add_argument(
        "--model",
        required=True,
        help="A sentence-transformers folder with mean pooling (e.g. an adapted run), or minilm.",
    )
    parser.add_argument(
        "--output-dir", required=True, help="Folder for the trained model, context_train.json, checkpoints."
    )
    parser.add_argument(
        "--train-text",
        help=f"WikiText-style text to train on, never the evaluation text ({WIKITEXT_HELP % 'validation'}).",
    )
    parser.add_argument(
        "--articles", type=positive_int, help="Only the first N articles (a smoke run; default: every article)."
    )
    parser.add_argument(
        "--window-tokens", type=positive_int, default=128, help="W: a window is W - 2 of a document's tokens."
    )
    parser.add_argument(
        "--document-tokens",
        type=positive_int,
        default=512,
        help="Tokens of a training document, [CLS] and [SEP] counted: an article is cut into documents of whole "
        "windows, each after its first starting with the article's title line.",
    )
    add_query_arguments(parser)
    parser.add_argument(
        "--queries",
        choices=QUERIES,
        default="titled",
        help="'titled': the title, the heading and the window's words (the development task's queries); 'plain': "
        "the window's words alone.",
    )
    parser.add_argument(
        "--negatives",
        choices=NEGATIVES,
        default="in-batch",
        help="'in-batch': a query ranks every window of the batch's documents; 'in-sequence': its own document's only.",
    )
    parser.add_argument(
        "--anchor",
        action="store_true",
        help="Mix in, step for step, windows read apart whose embeddings must stay the starting model's "
        "(sentence-transformers' EmbedDistillLoss, cosine): keeps short-text similarity (STS-B) near the start.",
    )
    parser.add_argument(
        "--scale", type=positive_float, default=20.0, help="Cosine scale of the ranking (1 / temperature)."
    )
    parser.add_argument("--max-steps", type=positive_int, default=300, help="Optimizer steps.")
    parser.add_argument("--train-batch-size", type=positive_int, default=8, help="Documents (or anchor texts) a step.")
    parser.add_argument("--learning-rate", type=positive_float, default=1e-5, help="Peak learning rate.")
    parser.add_argument("--warmup-ratio", type=float, default=0.1, help="Share of the steps warming up linearly.")
    parser.add_argument(
        "--checkpoint-steps", type=positive_int, default=50, help="Save a resumable checkpoint every N steps."
    )
    add_overwrite_argument(parser, "Train again over a finished or interrupted run.")
    return parser
