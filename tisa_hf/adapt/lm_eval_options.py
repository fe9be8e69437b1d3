"""The options of `tisa-hf lm-eval`; light (argparse only), so that `--help` answers without importing torch."""

from __future__ import annotations

import argparse

from ..common.options import (
    add_batch_tokens_argument,
    add_device_argument,
    add_out_argument,
    add_overwrite_argument,
    add_paired_arguments,
    positive_int,
)


def lm_eval_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tisa-hf lm-eval", description="Teacher agreement and masked-token loss against input length."
    )
    parser.add_argument("models", nargs="+", help="Checkpoints (folder, Hub id, minilm) or interp:NAME.")
    parser.add_argument("--text", required=True, help="Held-out plain text (e.g. WikiText's test.txt).")
    parser.add_argument("--lengths", type=int, nargs="+", required=True, help="Input lengths in tokens.")
    add_out_argument(parser, "Folder for lm_eval.json, lm_eval.md and lm_eval.png.")
    parser.add_argument("--teacher", help="The original model, for agreement at the lengths it reads.")
    parser.add_argument("--mlm-head", help="A *ForMaskedLM checkpoint whose head every model uses.")
    parser.add_argument("--tokenizer", help="Tokenizer (default: the teacher's, else the first model's).")
    parser.add_argument(
        "--max-tokens",
        type=positive_int,
        default=65536,
        help="Tokens per length: max-tokens // length blocks (at least one), spread over the text.",
    )
    add_batch_tokens_argument(parser)
    parser.add_argument("--mlm-probability", type=float, default=0.15, help="Share of tokens masked.")
    parser.add_argument("--seed", type=int, default=0, help="Masking seed, the same for every model.")
    add_device_argument(parser)
    add_paired_arguments(parser, "model's difference to REF", "blocks")
    add_overwrite_argument(
        parser,
        "Replace an existing lm_eval.json, or discard an unfinished evaluation's results (a rerun with the same "
        "settings resumes from them).",
    )
    return parser
