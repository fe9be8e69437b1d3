"""The options of `tisa-hf longembed` and `tisa-hf sts`; light (argparse and tisa_hf's light modules only),
so that `--help` answers without importing torch."""

from __future__ import annotations

import argparse

from ..cli_options import add_paired_arguments, positive_int

DEFAULT_TEXT = "../shared/text/wikitext-2/test.txt"
DEFAULT_STS_DATA = "../shared/glue/STS-B/dev.tsv"
DEFAULT_LENGTHS = [256, 512, 1024, 2048, 4096, 8192]
TASK_NAMES = ("passkey", "needle")


def longembed_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tisa-hf longembed",
        description="LongEmbed's passkey and needle retrieval (Acc@1) against document length, rebuilt offline.",
    )
    parser.add_argument(
        "systems",
        nargs="+",
        help="Models as read: MODEL (folder, Hub id or minilm; whole documents), trunc:MODEL (its table's first "
        "tokens), chunk:MODEL (chunk-and-average), interp:MODEL (position interpolation), tisa:MODE:S:MODEL "
        "(given TISA, unadapted).",
    )
    parser.add_argument("--out", required=True, help="Folder for longembed.json and longembed.png.")
    parser.add_argument("--tasks", nargs="+", choices=TASK_NAMES, default=list(TASK_NAMES))
    parser.add_argument(
        "--lengths",
        type=positive_int,
        nargs="+",
        default=DEFAULT_LENGTHS,
        help="Document lengths in tokens of the models' tokenizer, [CLS] and [SEP] counted.",
    )
    parser.add_argument("--documents", type=positive_int, default=100, help="Candidate documents per length (<= 100).")
    parser.add_argument("--queries", type=positive_int, default=50, help="Queries per length (<= --documents).")
    parser.add_argument("--text", default=DEFAULT_TEXT, help="Plain text the needle task's documents are cut from.")
    parser.add_argument("--seed", type=int, default=0, help="Seed of the documents (needles, keys, positions).")
    parser.add_argument("--batch-tokens", type=positive_int, default=8192, help="Tokens per forward pass.")
    parser.add_argument("--device", help="cpu, cuda, ... (default: cuda when available).")
    add_paired_arguments(parser, "system's Acc@1 minus REF's", "the queries")
    parser.add_argument(
        "--overwrite", action="store_true", help="Start over instead of resuming an existing longembed.json."
    )
    return parser


def sts_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tisa-hf sts",
        description="Zero-shot STS-B: Spearman (x100) of the pairs' cosine similarities against the gold scores, no "
        "fine-tuning (sentence-transformers' evaluation of all-MiniLM-L6-v2).",
    )
    parser.add_argument(
        "systems", nargs="+", help="Models, written as for `tisa-hf longembed` (minilm, a folder, tisa:...)."
    )
    parser.add_argument("--out", required=True, help="Folder for sts.json.")
    parser.add_argument("--data", default=DEFAULT_STS_DATA, help="GLUE's STS-B TSV (dev.tsv: the labelled split).")
    parser.add_argument("--batch-tokens", type=positive_int, default=8192, help="Tokens per forward pass.")
    parser.add_argument("--device", help="cpu, cuda, ... (default: cuda when available).")
    add_paired_arguments(parser, "system's Spearman minus REF's", "the pairs")
    parser.add_argument(
        "--overwrite", action="store_true", help="Score every system again instead of adding to an existing sts.json."
    )
    return parser
