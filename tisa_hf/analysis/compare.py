"""Key positional numbers of several encoders side by side, and their scatter against a per-model score
(the TISA paper's figure 2)."""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np
from matplotlib.figure import Figure

from ..common.result_files import METRICS_FILE
from ..errors import UsageError
from .pipeline import key_numbers

REPORT_SECTIONS = ("embeddings_toeplitz", "positional_profiles", "probing")  # what key_numbers reads


def saved_report(path: str) -> dict | None:
    """The metrics of a `tisa-hf analyze` report folder; None for a model (folder or Hub id) to analyse.

    A folder holding config.json is a model, whatever else it holds: a fine-tuning run folder keeps its training
    metrics.json next to the model. A folder with a metrics.json but no model must be a report."""
    folder = Path(path)
    metrics_file = folder / METRICS_FILE
    if (folder / "config.json").is_file() or not metrics_file.is_file():
        return None
    metrics = json.loads(metrics_file.read_text(encoding="utf-8"))
    missing = [key for key in REPORT_SECTIONS if key not in metrics]
    if missing:
        raise UsageError(
            f"{metrics_file} is not a `tisa-hf analyze` report (it lacks {', '.join(missing)}), and {folder} holds "
            "no model (config.json); pass a report folder, a model folder or a Hub id."
        )
    return metrics


def check_scores(scores: list[float] | None, num_models: int) -> None:
    if scores is not None and len(scores) != num_models:
        raise UsageError(f"--scores needs one score per model: got {len(scores)} scores for {num_models} models.")


def comparison_rows(metrics: dict[str, dict], scores: list[float] | None = None) -> list[dict]:
    """One row per model: its name, key numbers, and its score when given."""
    check_scores(scores, len(metrics))
    rows = []
    for index, (name, values) in enumerate(metrics.items()):
        row = {"model": name, **key_numbers(values)}
        if scores is not None:
            row["score"] = scores[index]
        rows.append(row)
    return rows


def format_table(rows: list[dict]) -> str:
    """A plain-text table with aligned columns."""
    header = list(rows[0])
    cells = [[f"{row[key]:.3f}" if isinstance(row[key], float) else str(row[key]) for key in header] for row in rows]
    widths = [max(len(h), *(len(r[i]) for r in cells)) for i, h in enumerate(header)]
    lines = ["  ".join(h.ljust(w) for h, w in zip(header, widths, strict=True))]
    lines += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) for r in cells]
    return "\n".join(lines)


def scatter_figure(rows: list[dict], score_name: str) -> Figure:
    """One panel per key number against the score, each model a labelled point."""
    names = [key for key in rows[0] if key not in ("model", "score")]
    cols = 4
    figure = Figure(figsize=(cols * 3.2, -(-len(names) // cols) * 3.0 + 0.5), layout="constrained")
    figure.suptitle(f"Positional properties against {score_name}")
    axes = np.atleast_1d(figure.subplots(-(-len(names) // cols), cols, squeeze=False)).ravel()
    scores = [row["score"] for row in rows]
    for axis, name in zip(axes, names, strict=False):
        values = [row[name] for row in rows]
        axis.scatter(values, scores)
        for row, value, score in zip(rows, values, scores, strict=True):
            axis.annotate(Path(row["model"]).name, (value, score), fontsize=6)
        axis.set_xlabel(f"{name} (dimensionless)")
        axis.set_ylabel(f"{score_name} (score units)")
        axis.set_title(name, fontsize=9)
    for axis in axes[len(names) :]:
        axis.set_visible(False)
    return figure


def write_comparison(rows: list[dict], directory: Path, score_name: str) -> list[Path]:
    """compare.json, compare.csv and, with scores, compare_scatter.png."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = [directory / "compare.json", directory / "compare.csv"]
    paths[0].write_text(json.dumps(rows, indent=1) + "\n", encoding="utf-8")
    with paths[1].open("w", newline="", encoding="utf-8") as handle:
        writer = csv.DictWriter(handle, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    if "score" in rows[0]:
        paths.append(directory / "compare_scatter.png")
        scatter_figure(rows, score_name).savefig(paths[-1], dpi=110)
    return paths
