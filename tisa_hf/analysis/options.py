"""The options of `tisa-hf analyze` and `tisa-hf compare`; light (argparse only), so that `--help` answers without
importing torch."""

from __future__ import annotations

import argparse

from ..common.options import add_out_argument, add_overwrite_argument


def _add_analysis_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-len", type=int, default=512, help="positions to analyse (default 512)")
    parser.add_argument("--tokenizer", help="tokenizer path or Hub id (default: the model's)")
    parser.add_argument("--text-file", help="texts for the trace vectors, one per line (default: built-in)")
    parser.add_argument("--word", default="the", help="the repeated word of identical-word probing")
    parser.add_argument("--include-special", action="store_true", help="keep [CLS]/[SEP] in the probing indicators")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs of analysis 6")
    parser.add_argument(
        "--no-progress", action="store_true", help="hide the progress bar (shown only on a terminal anyway)"
    )


def analyze_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tisa-hf analyze", description="Positional analysis report (HTML, JSON, PNG) of one encoder."
    )
    parser.add_argument("model", help="local folder or Hub id of a supported encoder (TISA or not), or minilm")
    add_out_argument(parser, "report folder (report.html, metrics.json, figures)")
    add_overwrite_argument(parser, "start over in an --out that holds a finished report")
    parser.add_argument("--layers", type=int, nargs="+", help="layers to show, counted from 0 (default: all)")
    _add_analysis_options(parser)
    return parser


def compare_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tisa-hf compare",
        description="Key positional numbers of several encoders in one table, optionally against a score.",
    )
    parser.add_argument(
        "models",
        nargs="+",
        help="model folders (fine-tuning runs included) or Hub ids, or report folders of `tisa-hf analyze`",
    )
    parser.add_argument("--scores", type=float, nargs="+", help="one score per model (e.g. GLUE dev accuracy)")
    parser.add_argument("--score-name", default="score", help="what the scores measure, for the plot")
    parser.add_argument("--out", help="folder for compare.json, compare.csv and compare_scatter.png")
    _add_analysis_options(parser)
    return parser
