"""The options of `tisa-hf demo` and their checks; light (no torch), so that `--help` and a refused command line
answer at once."""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from ..common.options import add_overwrite_argument, non_negative_int
from ..config import TisaConfig
from ..errors import usage_errors
from ..packaged import MINILM_ALIAS

if TYPE_CHECKING:
    from ..common.hub_access import ModelSource

SUMMARY_FILE = "summary.json"  # written last: a folder holding it holds a finished demo


def demo_parser(description: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tisa-hf demo",
        description=description or "Offline quickstart on the packaged MiniLM: patch, fit, plot, save, reload.",
    )
    parser.add_argument("--model", default=MINILM_ALIAS, help="Hub id or path (default: the packaged MiniLM)")
    parser.add_argument("--out", default="tisa-demo", help="output folder (default: %(default)s)")
    parser.add_argument(
        "--kernels",
        type=non_negative_int,
        default=5,
        help="S, kernels per head and layer; 0 fits none, bag of words with --mode replace (default: %(default)s)",
    )
    parser.add_argument(
        "--mode",
        default="add",
        choices=["add", "replace"],
        help="add: TISA's bias beside the position embeddings; replace: the embeddings replaced by their mean, so "
        "inputs may be longer than the position table (default: %(default)s)",
    )
    add_overwrite_argument(parser, "start over in an --out that holds a finished demo")
    return parser


def check_demo(args: argparse.Namespace) -> tuple[ModelSource, TisaConfig]:
    """Before torch is imported: the model is there to load, the TISA settings hold together, and --out can hold
    the demo, and holds no finished one unless --overwrite (whose summary is then removed, so that an interrupted
    new demo does not look finished). Returns where the model loads from and the TISA settings."""
    from ..common.hub_access import model_source  # here: --help needs none of the checks' libraries
    from ..common.result_files import claim_finished_folder
    from ..common.saved_files import check_output_folder

    source = model_source(args.model, needs_tokenizer=True)
    with usage_errors():
        tisa = TisaConfig(num_kernels=args.kernels, mode=args.mode)
    check_output_folder(args.out, "--out")
    claim_finished_folder(Path(args.out), SUMMARY_FILE, "demo", args.overwrite)
    return source, tisa
