"""`tisa-hf report RUNS_DIR --out table.md`: the TISA paper's table 3 layout from a folder of runs.

One column per task (MNLI gives MNLI-m and MNLI-mm), one row per model variant (baseline, then each TISA
setting), each cell the median over seeds of the task's score on a 0-100 scale with the number of seeds; then
Δ, the best TISA score (S > 0) minus the baseline, and Δ%, the relative error reduction Δ / (100 - baseline) · 100.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

from .glue_data import TASKS

# (column, task, dev split, metric) in the paper's column order.
DEFAULT_COLUMNS: tuple[tuple[str, str, str, str], ...] = (
    ("CoLA", "cola", "validation", "matthews_correlation"),
    ("SST-2", "sst2", "validation", "accuracy"),
    ("MRPC", "mrpc", "validation", "accuracy"),
    ("STS-B", "stsb", "validation", "pearson"),
    ("QQP", "qqp", "validation", "accuracy"),
    ("MNLI-m", "mnli", "validation_matched", "accuracy"),
    ("MNLI-mm", "mnli", "validation_mismatched", "accuracy"),
    ("QNLI", "qnli", "validation", "accuracy"),
    ("RTE", "rte", "validation", "accuracy"),
    ("WNLI", "wnli", "validation", "accuracy"),
)
BASELINE = "baseline"


def variant_label(tisa: dict[str, Any] | None) -> str:
    if not tisa:
        return BASELINE
    if tisa["num_kernels"] == 0:
        return "S=0 (bag of words)" if tisa["mode"] == "replace" else "S=0 (add)"
    return f"TISA S={tisa['num_kernels']} ({tisa['mode']})"


def _variant_order(label: str) -> tuple:
    if label == BASELINE:
        return (0,)
    return (1, label)


def collect(runs_dir: str | Path, mode: str | None = None) -> list[dict[str, Any]]:
    """Every run's metrics.json under `runs_dir`; with `mode`, only the baselines and the TISA runs of that mode."""
    paths = sorted(Path(runs_dir).rglob("metrics.json"))
    if not paths:
        raise ValueError(f"No metrics.json under {runs_dir}; point report at the folder holding the runs.")
    results = [json.loads(path.read_text()) for path in paths]
    return [result for result in results if mode is None or not result["tisa"] or result["tisa"]["mode"] == mode]


def score_table(
    results: list[dict[str, Any]], columns: tuple[tuple[str, str, str, str], ...] = DEFAULT_COLUMNS
) -> dict[str, dict[str, dict[str, dict[str, float | int]]]]:
    """{model: {variant: {column: {"median", "min", "max": score (0-100), "seeds": n}}}}."""
    scores: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for result in results:
        for column, task, split, metric in columns:
            value = result["metrics"].get(split, {}).get(metric) if result["task"] == task else None
            if value is not None:
                scores[(result["model"], variant_label(result["tisa"]), column)].append(100.0 * value)
    table: dict[str, dict[str, dict[str, dict[str, float | int]]]] = defaultdict(lambda: defaultdict(dict))
    for (model, variant, column), values in scores.items():
        table[model][variant][column] = {
            "median": statistics.median(values),
            "min": min(values),
            "max": max(values),
            "seeds": len(values),
        }
    return table


def gains(variants: dict[str, dict[str, dict[str, float | int]]], column: str) -> tuple[float, float] | None:
    """(Δ, Δ%) of one column: best TISA (S > 0) median minus the baseline's, and the relative error reduction."""
    baseline = variants.get(BASELINE, {}).get(column)
    tisa = [
        cells[column]["median"] for label, cells in variants.items() if label.startswith("TISA") and column in cells
    ]
    if baseline is None or not tisa:
        return None
    delta = max(tisa) - baseline["median"]
    error = 100.0 - baseline["median"]
    return delta, (100.0 * delta / error if error else float("nan"))


def _cell(cell: dict[str, float | int], spread: bool) -> str:
    text = f"{cell['median']:.1f}"
    if spread:
        text += f" [{cell['min']:.1f}, {cell['max']:.1f}]"
    return f"{text} ({cell['seeds']})"


def render(table: dict, columns: tuple[tuple[str, str, str, str], ...] = DEFAULT_COLUMNS, spread: bool = False) -> str:
    blocks = []
    for model, variants in table.items():
        used = [column for column, *_ in columns if any(column in cells for cells in variants.values())]
        lines = [f"### {model}", "", "| | " + " | ".join(used) + " |", "|---" * (len(used) + 1) + "|"]
        for label in sorted(variants, key=_variant_order):
            cells = variants[label]
            row = [_cell(cells[c], spread) if c in cells else "" for c in used]
            lines.append(f"| {label} | " + " | ".join(row) + " |")
        column_gains = [gains(variants, column) for column in used]
        lines.append("| Δ | " + " | ".join(f"{g[0]:+.1f}" if g else "" for g in column_gains) + " |")
        lines.append("| Δ% | " + " | ".join(f"{g[1]:+.1f}" if g else "" for g in column_gains) + " |")
        blocks.append("\n".join(lines))
    note = (
        f"Cells: median dev score over seeds{' [min, max]' if spread else ''} (number of seeds). "
        "Δ: best TISA minus baseline, in points. "
        "Δ%: relative error reduction, Δ / (100 - baseline) x 100."
    )
    return "\n\n".join(blocks) + "\n\n" + note + "\n"


def parse_metric_overrides(values: list[str]) -> tuple[tuple[str, str, str, str], ...]:
    """`--metric mrpc=f1` picks another metric for every column of that task."""
    chosen = {}
    for value in values:
        task, sep, metric = value.partition("=")
        if not sep or task not in TASKS:
            raise ValueError(f"--metric takes TASK=METRIC with TASK one of {', '.join(TASKS)}; got {value!r}.")
        chosen[task] = metric
    return tuple((column, task, split, chosen.get(task, metric)) for column, task, split, metric in DEFAULT_COLUMNS)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tisa-hf report", description=__doc__.split("\n\n")[0])
    parser.add_argument("runs_dir", help="Folder searched (recursively) for metrics.json files.")
    parser.add_argument("--out", help="Write the Markdown table here (it is printed either way).")
    parser.add_argument("--metric", action="append", default=[], help="TASK=METRIC, e.g. mrpc=f1 (repeatable).")
    parser.add_argument("--spread", action="store_true", help="Show each cell's [min, max] over seeds too.")
    parser.add_argument(
        "--mode", choices=("add", "replace"), help="Only the baselines and the TISA runs of this mode (table 3a / 3b)."
    )
    options = parser.parse_args(argv)
    try:
        columns = parse_metric_overrides(options.metric)
        text = render(score_table(collect(options.runs_dir, options.mode), columns), columns, spread=options.spread)
    except ValueError as error:
        print(f"tisa-hf report: {error}", file=sys.stderr)
        return 2
    print(text)
    if options.out:
        Path(options.out).write_text(text)
    return 0
