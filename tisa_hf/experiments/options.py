"""The options of `tisa-hf sweep` and `tisa-hf report`; light (argparse only), so that `--help` answers without
importing torch."""

from __future__ import annotations

import argparse

from ..common.options import add_bootstrap_arguments


def sweep_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tisa-hf sweep", description="Every (task, variant, seed) run of a grid, one process launch each."
    )
    parser.add_argument("--config", required=True, help="Sweep YAML file.")
    parser.add_argument("--dry-run", action="store_true", help="Print the runs and their status, run nothing.")
    parser.add_argument(
        "--tasks", nargs="+", help="Only these of the file's tasks (to split one grid across processes or GPUs)."
    )
    parser.add_argument("--seeds", nargs="+", type=int, help="Only these of the file's seeds.")
    parser.add_argument("--folds", nargs="+", type=int, help="Only these of the file's cross-validation folds.")
    parser.add_argument("--variants", nargs="+", help="Only these of the file's variants.")
    return parser


def report_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tisa-hf report", description="Results tables of fine-tuning runs (the TISA paper's table 3 layout)."
    )
    parser.add_argument(
        "runs_dir",
        nargs="+",
        help="Folders searched (recursively) for metrics.json files: a sweep's output_dir, or some of its variants' "
        "folders (the chosen rates of a learning-rate grid).",
    )
    parser.add_argument("--out", help="Write the Markdown table here (it is printed either way).")
    parser.add_argument("--metric", action="append", default=[], help="TASK=METRIC, e.g. mrpc=f1 (repeatable).")
    parser.add_argument("--spread", action="store_true", help="Show each cell's [min, max] over seeds too.")
    parser.add_argument(
        "--mode", choices=("add", "replace"), help="Only the baselines and the TISA runs of this mode (table 3a / 3b)."
    )
    parser.add_argument(
        "--seeds", nargs="+", type=int, help="Only runs of these seeds: the balanced part of a grid still running."
    )
    parser.add_argument(
        "--paired",
        metavar="VARIANT",
        help="Also the paired difference of every other variant to VARIANT (a row name, e.g. baseline), with a 95%% "
        "bootstrap interval over dev examples and seeds; needs the runs' predictions.json.",
    )
    add_bootstrap_arguments(parser)
    parser.add_argument("--json", help="Write every run's record (and the paired differences) here as JSON.")
    return parser
