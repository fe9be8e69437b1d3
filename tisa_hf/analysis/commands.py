"""`tisa-hf analyze` and `tisa-hf compare`."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..common.result_files import METRICS_FILE, claim_finished_folder
from ..common.saved_files import check_output_folder
from .compare import check_scores, comparison_rows, format_table, saved_report, write_comparison
from .encoder_loading import load_model, load_tokenizer
from .html_report import REPORT_FILE, write_html, write_metrics
from .options import analyze_parser, compare_parser
from .pipeline import AnalysisOptions, analyze_model
from .plots import save_figures
from .probing import read_texts


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
    args = analyze_parser().parse_args(argv)
    out = Path(args.out)
    check_output_folder(out, "--out")
    claim_finished_folder(out, REPORT_FILE, "report", args.overwrite)
    result = _analyze_one(args.model, args, args.layers)
    figures = save_figures(result, out)
    write_metrics(result, out)
    report = write_html(result, figures, out)
    print(f"Wrote {report}, {out / METRICS_FILE} and {len(figures)} figures.")
    return 0


def compare(argv: list[str]) -> int:
    args = compare_parser().parse_args(argv)
    check_scores(args.scores, len(args.models))
    if args.out:
        check_output_folder(args.out, "--out")
    metrics = {}
    for name in args.models:
        report = saved_report(name)
        metrics[name] = report if report is not None else _analyze_one(name, args).metrics
    rows = comparison_rows(metrics, args.scores)
    print(format_table(rows))
    if args.out:
        for path in write_comparison(rows, Path(args.out), args.score_name):
            print(f"Wrote {path}")
    return 0
