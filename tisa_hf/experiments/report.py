"""`tisa-hf report RUNS_DIR --out table.md`: the TISA paper's table 3 layout from a folder of runs.

Runs of document classification (`tisa-hf classify`) get tables of their own (`document_report`): test accuracy and
positive-class F1 per fold and cross-validated. For GLUE runs: one column per task (MNLI gives MNLI-m and MNLI-mm),
one row per model variant (baseline, then each TISA setting), each cell the median over seeds of the task's score
on a 0-100 scale with the number of seeds; then Δ, the best TISA score (S > 0) minus the baseline, and Δ%, the
relative error reduction Δ / (100 - baseline) · 100.

`--paired VARIANT` adds, for every other variant, the paired difference to VARIANT per seed and its bootstrap
interval over dev examples and seeds, from the runs' predictions files; `--json FILE` writes every run's record
(settings, seed, metrics, steps, wall time, evaluation history) and the paired differences, to recompute from.
"""

from __future__ import annotations

import json
import logging
import math
import statistics
from collections import Counter, defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..common.machine import describe_machine
from ..common.paired import paired_bootstrap
from ..common.tables import seed_paired_cell
from ..errors import UsageError
from ..finetune.glue.metrics import glue_metric
from ..finetune.predictions import SplitPredictions, read_predictions
from ..finetune.run_folder import METRICS_FILE, PREDICTIONS_FILE, RunFolder
from ..finetune.task_tables import TASKS
from .options import report_parser
from .variants import BASELINE, compared_model, is_document_run, label_variants, variant_order

logger = logging.getLogger(__name__)

# (column, task, dev split, metric) in the paper's column order (the task table's): each task's main metric.
DEFAULT_COLUMNS: tuple[tuple[str, str, str, str], ...] = tuple(
    (column, task.name, split, task.main_metric) for task in TASKS.values() for column, split in task.columns
)


def collect(
    runs_dirs: str | Path | Sequence[str | Path],
    mode: str | None = None,
    seeds: Sequence[int] | None = None,
    left_out: list[str] | None = None,
) -> list[dict[str, Any]]:
    """Every run's metrics.json under `runs_dirs` (one folder or several; a run under two counts once), with its
    folder (`run_dir`) and `variant` (`label_variants`), skipping with a warning a record that cannot be read
    (`RunFolder.read_record`) or whose metrics are not all finite (a diverged run is no result: a NaN would sit in a
    median as if it were a seed); each skipped run is appended to `left_out` as "folder: reason", so that the report
    can say what its tables do not hold; with `mode`, only the baselines and the TISA runs of that mode; with
    `seeds`, only runs of those seeds (the balanced part of a grid that is still running)."""
    folders = [runs_dirs] if isinstance(runs_dirs, str | Path) else list(runs_dirs)
    where = ", ".join(map(str, folders))
    paths = sorted({path for folder in folders for path in Path(folder).rglob(METRICS_FILE)})
    if not paths:
        raise UsageError(f"No {METRICS_FILE} under {where}; point report at the folder holding the runs.")
    results = []
    for path in paths:
        try:
            record = RunFolder(path.parent).read_record()
            non_finite = non_finite_metrics(record["metrics"])
            if non_finite:
                raise UsageError(
                    f"{path} holds non-finite metrics ({', '.join(non_finite)}): the run diverged or its data held "
                    "NaN/inf, so it is no result; train it again (`tisa-hf sweep` re-runs it once the folder is "
                    "removed)."
                )
        except UsageError as error:  # a damaged or diverged record leaves the other runs' table intact
            logger.warning("Skipping %s: %s", path.parent, error)
            if left_out is not None:
                left_out.append(f"{path.parent}: {error}")
            continue
        results.append({**record, "run_dir": str(path.parent)})
    results = [result for result in results if mode is None or not result["tisa"] or result["tisa"]["mode"] == mode]
    if seeds is not None:
        found = sorted({result["seed"] for result in results if result.get("seed") is not None})
        results = [result for result in results if result.get("seed") in seeds]
        if not results:
            raise UsageError(
                f"No run of seed(s) {', '.join(map(str, seeds))} under {where}; "
                f"its runs have seed(s) {', '.join(map(str, found)) or 'none recorded'}."
            )
    label_variants(results)
    return results


def non_finite_metrics(metrics: dict[str, Any], prefix: str = "") -> list[str]:
    """The names (`validation/pearson`) of every NaN or infinite number in a record's metrics."""
    found = []
    for name, value in metrics.items():
        if isinstance(value, dict):
            found += non_finite_metrics(value, f"{prefix}{name}/")
        elif isinstance(value, float) and not math.isfinite(value):
            found.append(f"{prefix}{name}={value}")
    return found


def score_table(
    results: list[dict[str, Any]], columns: tuple[tuple[str, str, str, str], ...] = DEFAULT_COLUMNS
) -> dict[str, dict[str, dict[str, dict[str, float | int]]]]:
    """{model: {variant: {column: {"median", "min", "max": score (0-100), "seeds": n}}}}."""
    scores: dict[tuple[str, str, str], list[float]] = defaultdict(list)
    for result in results:
        for column, task, split, metric in columns:
            value = result["metrics"].get(split, {}).get(metric) if result["task"] == task else None
            if value is not None:
                scores[(compared_model(result), result["variant"], column)].append(100.0 * value)
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
    blocks, any_gains = [], False
    for model, variants in table.items():
        used = [column for column, *_ in columns if any(column in cells for cells in variants.values())]
        lines = [f"### {model}", "", "| | " + " | ".join(used) + " |", "|---" * (len(used) + 1) + "|"]
        for label in sorted(variants, key=variant_order):
            cells = variants[label]
            row = [_cell(cells[c], spread) if c in cells else "" for c in used]
            lines.append(f"| {label} | " + " | ".join(row) + " |")
        column_gains = [gains(variants, column) for column in used]
        if any(column_gains):  # a grid without a baseline or without TISA runs has no gains to show
            any_gains = True
            lines.append("| Δ | " + " | ".join(f"{g[0]:+.1f}" if g else "" for g in column_gains) + " |")
            lines.append("| Δ% | " + " | ".join(f"{g[1]:+.1f}" if g else "" for g in column_gains) + " |")
        blocks.append("\n".join(lines))
    note = f"Cells: median dev score over seeds{' [min, max]' if spread else ''} (number of seeds)."
    if any_gains:
        note += " Δ: best TISA minus baseline, in points. Δ%: relative error reduction, Δ / (100 - baseline) x 100."

    return "\n\n".join(blocks) + "\n\n" + note + "\n"


def machines_note(results: list[dict[str, Any]]) -> str:
    """Which machines made the runs (wall times compare only within one), and a warning when the runs mix devices,
    whose scores differ by more than float tolerance."""
    counts = Counter(describe_machine(result.get("machine")) for result in results)
    line = "Machines: " + "; ".join(f"{count} run(s) {description}" for description, count in counts.items()) + "."
    devices = sorted({result["machine"]["device"] for result in results if result.get("machine")})
    if len(devices) > 1:
        line += f" The runs mix devices ({', '.join(devices)}): report each device's runs in a table of its own."
    return line + "\n"


def _paired_runs(results: list[dict[str, Any]], baseline: str) -> dict[tuple[str, str, str], dict[int, dict[str, Any]]]:
    """{(model, task, variant): {seed: run}}, refusing runs without a seed, duplicate seeds and a missing baseline."""
    runs: dict[tuple[str, str, str], dict[int, dict[str, Any]]] = defaultdict(dict)
    for result in results:
        if result.get("seed") is None:
            raise UsageError(f"{result['run_dir']}/{METRICS_FILE} names no seed, so it cannot be paired; rerun it.")
        seeds = runs[(compared_model(result), result["task"], result["variant"])]
        other = seeds.get(result["seed"])
        if other is not None:
            raise UsageError(
                f"{other['run_dir']} and {result['run_dir']} are both seed {result['seed']} of {result['variant']} on "
                f"{result['task']}; keep one of them in the folder to pair them."
            )
        seeds[result["seed"]] = result
    for model in sorted({model for model, _, _ in runs}):
        variants = sorted({variant for m, _, variant in runs if m == model}, key=variant_order)
        if baseline not in variants:
            raise UsageError(
                f"--paired {baseline!r}: no such variant for {model}; its variants are {', '.join(variants)}."
            )
    return runs


def paired_differences(
    results: list[dict[str, Any]],
    baseline: str,
    columns: tuple[tuple[str, str, str, str], ...] = DEFAULT_COLUMNS,
    replicates: int = 1000,
    seed: int = 0,
) -> list[dict[str, Any]]:
    """For every model, column and variant other than `baseline` that shares seeds with it: the per-seed paired
    differences in points and their mean with a 95% bootstrap interval (`paired_bootstrap`), computed with the
    column's metric from the runs' predictions files."""
    runs = _paired_runs(results, baseline)
    pairs = []
    for (model, task, variant), by_seed in runs.items():
        base = runs.get((model, task, baseline), {})
        common = sorted(set(by_seed) & set(base))
        if variant == baseline or not common:
            continue
        for column, column_task, split, metric in columns:
            if column_task == task:
                pairs.append((model, column, task, split, metric, variant, {s: (by_seed[s], base[s]) for s in common}))
    needed = sorted({run["run_dir"] for *_, seeds in pairs for both in seeds.values() for run in both})
    missing = [run_dir for run_dir in needed if not RunFolder(run_dir).predictions_file.is_file()]
    if missing:
        raise UsageError(
            f"--paired needs the dev predictions of every paired run; {len(missing)} run(s) have no "
            f"{PREDICTIONS_FILE} (made before runs saved them): {', '.join(missing)}. Rerun them or leave out --paired."
        )
    predictions = {run_dir: read_predictions(run_dir) for run_dir in needed}

    entries = []
    for model, column, task, split, metric, variant, seeds in pairs:
        sides = [{s: predictions[both[side]["run_dir"]].splits[split] for s, both in seeds.items()} for side in (0, 1)]
        difference = paired_bootstrap(*sides, _metric_in_points(task, metric), replicates, seed)
        entries.append(
            {
                "model": model,
                "column": column,
                "task": task,
                "split": split,
                "metric": metric,
                "variant": variant,
                "baseline": baseline,
                "seeds": list(difference.seeds),
                "differences": list(difference.differences),
                "mean": difference.mean,
                "low": difference.low,
                "high": difference.high,
                "excludes_zero": difference.excludes_zero,
            }
        )
    column_order = [column for column, *_ in columns]
    entries.sort(key=lambda e: (e["model"], variant_order(e["variant"]), column_order.index(e["column"])))
    return entries


def _metric_in_points(task: str, metric: str):
    """The paired score: the task's own metric (`glue_metric`) x 100 on the dev examples at the given indices."""

    def score(predictions: SplitPredictions, indices: np.ndarray) -> float:
        return 100.0 * glue_metric(task, metric, predictions.logits[indices], predictions.labels[indices])

    return score


def render_paired(
    entries: list[dict[str, Any]],
    columns: tuple[tuple[str, str, str, str], ...] = DEFAULT_COLUMNS,
    replicates: int = 1000,
) -> str:
    """One table per model: a row per variant, each cell mean [95% interval] (seeds), * where it excludes 0."""
    blocks = []
    for model in sorted({entry["model"] for entry in entries}):
        mine = [entry for entry in entries if entry["model"] == model]
        cells = {(entry["variant"], entry["column"]): entry for entry in mine}
        used = [column for column, *_ in columns if any(entry["column"] == column for entry in mine)]
        baseline = mine[0]["baseline"]
        lines = [f"### {model}: paired differences to {baseline}", "", "| | " + " | ".join(used) + " |"]
        lines.append("|---" * (len(used) + 1) + "|")
        for variant in sorted({entry["variant"] for entry in mine}, key=variant_order):
            row = [seed_paired_cell(cells[(variant, column)]) if (variant, column) in cells else "" for column in used]
            lines.append(f"| {variant} | " + " | ".join(row) + " |")
        blocks.append("\n".join(lines))
    excluding = [
        f"{entry['column']} {entry['variant']} {seed_paired_cell(entry)}" for entry in entries if entry["excludes_zero"]
    ]
    reference = entries[0]["baseline"] if entries else "the reference"
    note = (
        f"Cells: variant minus {reference} in points, the mean over seeds of the difference on the same dev examples, "
        f"[95% bootstrap interval over dev examples and seeds, {replicates} resamples] (paired seeds); "
        "* the interval excludes 0.\n\n"
        + ("Intervals that exclude 0: " + "; ".join(excluding) + "." if excluding else "No interval excludes 0.")
    )
    return "\n\n".join(blocks) + "\n\n" + note + "\n"


def parse_metric_overrides(values: list[str]) -> tuple[tuple[str, str, str, str], ...]:
    """`--metric mrpc=f1` picks another metric for every column of that task."""
    chosen = {}
    for value in values:
        task, sep, metric = value.partition("=")
        if not sep or task not in TASKS:
            raise UsageError(f"--metric takes TASK=METRIC with TASK one of {', '.join(TASKS)}; got {value!r}.")
        chosen[task] = metric
    return tuple((column, task, split, chosen.get(task, metric)) for column, task, split, metric in DEFAULT_COLUMNS)


def main(argv: list[str] | None = None) -> int:
    from . import document_report  # it builds on this module

    options = report_parser().parse_args(argv)
    columns = parse_metric_overrides(options.metric)
    left_out: list[str] = []
    results = collect(options.runs_dir, options.mode, options.seeds, left_out)
    glue = [result for result in results if not is_document_run(result)]
    documents = [result for result in results if is_document_run(result)]
    blocks = [render(score_table(glue, columns), columns, spread=options.spread)] if glue else []
    blocks += [document_report.render(document_report.fold_table(documents))] if documents else []
    text = "\n".join(blocks) + machines_note(results)
    if left_out:
        text += f"\nLeft out of every table ({len(left_out)} run(s)):\n" + "\n".join(f"- {line}" for line in left_out)
        text += "\n"
    document: dict[str, Any] = {"runs": results, "left_out": left_out}
    if options.paired:
        entries = []
        if glue:
            entries = paired_differences(glue, options.paired, columns, options.bootstrap, options.bootstrap_seed)
            text += "\n" + render_paired(entries, columns, options.bootstrap)
        if documents:
            found = document_report.paired_differences(
                documents, options.paired, options.bootstrap, options.bootstrap_seed
            )
            text += "\n" + document_report.render_paired(found, options.bootstrap)
            entries += found
        document["paired"] = {
            "baseline": options.paired,
            "replicates": options.bootstrap,
            "bootstrap_seed": options.bootstrap_seed,
            "confidence": 0.95,
            "differences": entries,
        }
    print(text)
    if options.out:
        Path(options.out).write_text(text)
    if options.json:
        Path(options.json).write_text(json.dumps(document, indent=1))
    return 0
