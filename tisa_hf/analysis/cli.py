"""`tisa-hf analyze` and `tisa-hf compare`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from .compare import check_scores, comparison_rows, format_table, saved_report, write_comparison
from .loading import load_model, load_tokenizer
from .pipeline import AnalysisOptions, analyze_model
from .plots import save_figures
from .probing import read_texts
from .report import write_html, write_metrics


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


def _options(args: argparse.Namespace, layers: list[int] | None = None) -> AnalysisOptions:
    options = AnalysisOptions(
        max_len=args.max_len,
        layers=layers,
        word=args.word,
        exclude_special=not args.include_special,
        seed=args.seed,
        progress=not args.no_progress,
    )
    if args.text_file:
        options.texts = read_texts(args.text_file)
    return options


def _analyze_one(path_or_id: str, args: argparse.Namespace, layers: list[int] | None = None):
    model = load_model(path_or_id)
    tokenizer = load_tokenizer(args.tokenizer or path_or_id)
    return analyze_model(model, tokenizer, path_or_id, _options(args, layers))


def analyze(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="tisa-hf analyze", description="Positional analysis report (HTML, JSON, PNG) of one encoder."
    )
    parser.add_argument("model", help="local folder or Hub id of a supported encoder (TISA or not), or minilm")
    parser.add_argument("--out", required=True, help="report folder (report.html, metrics.json, figures)")
    parser.add_argument("--layers", type=int, nargs="+", help="layers to show, counted from 0 (default: all)")
    _add_analysis_options(parser)
    args = parser.parse_args(argv)
    try:
        result = _analyze_one(args.model, args, args.layers)
    except ValueError as error:
        print(f"tisa-hf analyze: error: {error}", file=sys.stderr)
        return 2
    out = Path(args.out)
    figures = save_figures(result, out)
    write_metrics(result, out)
    report = write_html(result, figures, out)
    print(f"Wrote {report}, {out / 'metrics.json'} and {len(figures)} figures.")
    return 0


def compare(argv: list[str]) -> int:
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
    args = parser.parse_args(argv)
    try:
        check_scores(args.scores, len(args.models))
        metrics = {}
        for name in args.models:
            report = saved_report(name)
            metrics[name] = report if report is not None else _analyze_one(name, args).metrics
        rows = comparison_rows(metrics, args.scores)
    except ValueError as error:
        print(f"tisa-hf compare: error: {error}", file=sys.stderr)
        return 2
    print(format_table(rows))
    if args.out:
        for path in write_comparison(rows, Path(args.out), args.score_name):
            print(f"Wrote {path}")
    return 0
