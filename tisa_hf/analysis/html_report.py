"""The report of one analysis: `metrics.json` and one self-contained `report.html` with the figures inlined."""

from __future__ import annotations

import base64
import html
import json
from pathlib import Path

from ..common.result_files import METRICS_FILE
from ..profiles import DEFAULT_PROFILE_LENGTH
from .pipeline import AnalysisResult
from .plots import PROBING_PERCENTILE

REPORT_FILE = "report.html"  # written last: a folder holding it holds a finished report
SECTIONS: dict[str, str] = {
    "embeddings": "1. Toeplitzness of the position embeddings",
    "profiles": "2. Positional attention profiles F̂_P",
    "scoring": "3. TISA scoring functions",
    "probing": "4. Property indicators by identical-word probing",
    "spectral": "5. Spectral view of the position embeddings and trace vectors",
    "variance": "6. Latent position in the attention-output variance",
}

NEGATIVE_R2_NOTE = (
    '<p class="note">R² compares each f with the F̂_P profile of the weights as they are now, the profile the kernels '
    "are fitted to when TISA is added. After fine-tuning, f and the rest of the model have changed together, so f "
    "need not match the profile of the fine-tuned weights any more; R² &lt; 0 means f follows that profile less "
    "well than a constant would, not that the model is broken.</p>"
)

STYLE = (
    "body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em;color:#222}"
    "img{max-width:100%;border:1px solid #ddd;margin:.5em 0}table{border-collapse:collapse;margin:.5em 0}"
    "td,th{border:1px solid #ccc;padding:.2em .6em;text-align:right}th{background:#f4f4f4}"
    "p.note{color:#555;font-size:.9em}"
)


def write_metrics(result: AnalysisResult, directory: Path) -> Path:
    path = directory / METRICS_FILE
    path.write_text(json.dumps(result.metrics, indent=1) + "\n", encoding="utf-8")
    return path


def _image(path: Path, alt: str) -> str:
    encoded = base64.b64encode(path.read_bytes()).decode("ascii")
    return f'<img alt="{html.escape(alt)}" src="data:image/png;base64,{encoded}">'


def _table(header: list[str], rows: list[list[object]]) -> str:
    def cell(value: object) -> str:
        return f"{value:.3f}" if isinstance(value, float) else html.escape(str(value))

    head = "".join(f"<th>{html.escape(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{cell(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table><tr>{head}</tr>{body}</table>"


def _per_head_table(layers: list[int], values: list[list[float]]) -> str:
    heads = len(values[0])
    return _table(
        ["layer"] + [f"head {h}" for h in range(heads)],
        [[layer, *row] for layer, row in zip(layers, values, strict=True)],
    )


def _section_bodies(result: AnalysisResult, figures: dict[str, Path]) -> dict[str, str]:
    m = result.metrics
    tisa = m["model"]["tisa"]
    replace_note = (
        '<p class="note">This model runs in TISA mode="replace": only the mean of its position table reaches the '
        "model. The numbers below describe the stored table.</p>"
        if tisa and tisa["mode"] == "replace"
        else ""
    )
    emb = m["embeddings_toeplitz"]
    profiles = m["positional_profiles"]
    scoring = m["scoring_functions"]
    probing = m["probing"]
    spectral = m["spectral"]
    traces = m["trace_vectors"]
    variance = m["latent_position_variance"]

    def figure(name: str) -> str:
        return _image(figures[name], name) if name in figures else ""

    bodies = {
        "embeddings": replace_note
        + _table(
            ["positions", "Toeplitz R² of P"],
            [[emb["length"], emb["r2"]]]
            + ([[emb["prefix_length"], emb["prefix_r2"]]] if emb["prefix_length"] < emb["length"] else []),
        )
        + figure("position_gram"),
        "profiles": replace_note
        + f"<p>F̂_P over {profiles['length']} positions; mean Toeplitz R² {profiles['r2_mean']:.3f}. "
        "Toeplitz R² per layer and head:</p>"
        + _per_head_table(profiles["layers"], profiles["r2"])
        + figure("profile_heatmaps")
        + figure("profile_sections"),
        "scoring": (
            "<p>This model has no TISA scoring functions (not patched with TISA, or S = 0).</p>"
            if scoring is None
            else f"<p>S = {scoring['num_kernels']} kernels per head; f(k) against the Toeplitz profile of F̂_P over "
            f"|k| ≤ {scoring['window']}, mean weighted R² {scoring['r2_mean']:.3f}. The profile is the one the kernel "
            f"fit uses, over {scoring['profile_length']} positions (the TISA setting profile_length, else the "
            f"position table up to {DEFAULT_PROFILE_LENGTH}), whatever --max-len. R² per layer and head:</p>"
            + _per_head_table(scoring["layers"], scoring["r2"])
            + (NEGATIVE_R2_NOTE if min(map(min, scoring["r2"])) < 0 else "")
            + figure("scoring_functions")
        ),
        "probing": f"<p>First-layer attention on one repeated word ('{html.escape(probing['word'])}', "
        f"{probing['length']} tokens), [CLS]/[SEP] {'excluded' if probing['exclude_special'] else 'included'}. "
        "AIV: in-diagonal over total variance (0 = translation invariant); OPR: share of pairs where the farther "
        f"key gets more attention (0 = monotonic), also within {probing['local_offsets']} offsets; SD: symmetric "
        f"discrepancy (0 = symmetric); DB: (right - left) / (right + left) within {probing['local_offsets']} "
        f"offsets. The heat maps share one colour scale, from 0 to the {PROBING_PERCENTILE}th percentile of all "
        "heads' probabilities (larger ones show in its top colour), so that a few large values do not darken "
        "the rest.</p>"
        + _table(
            ["head", "AIV", "OPR", "OPR local", "SD", "DB"],
            [
                [head, *(probing[name][head] for name in ("aiv", "opr", "opr_local", "sd", "db"))]
                for head in range(len(probing["aiv"]))
            ]
            + [["mean", *(probing["mean"][name] for name in ("aiv", "opr", "opr_local", "sd", "db"))]],
        )
        + figure("probing"),
        "spectral": replace_note
        + f"<p>Median peak frequency over dimensions: {spectral['peak_frequency_median']:.4f} cycles per position. "
        "Principal components holding a share of the variance of E_P:</p>"
        + _table(["share of variance", "components"], [[k, v] for k, v in spectral["pca_dimensions_for"].items()])
        + figure("spectrum")
        + f"<p>t-offset trace vectors over {traces['num_texts']} texts; where each head looks most:</p>"
        + _table(
            ["layer"] + [f"head {h}" for h in range(len(traces["head_direction"][0]))],
            [[layer, *row] for layer, row in zip(traces["layers"], traces["head_direction"], strict=True)],
        )
        + figure("trace_vectors"),
        "variance": "<p>Position embeddings replaced by their mean, no TISA bias, random tokens "
        f"({variance['batch_size']} sequences). Slope of log variance against log position: bidirectional "
        f"{variance['bidirectional_log_log_slope']:.3f}, causal {variance['causal_log_log_slope']:.3f} "
        "(about -1 means the causal variance reveals position).</p>" + figure("attention_variance"),
    }
    return bodies


def write_html(result: AnalysisResult, figures: dict[str, Path], directory: Path) -> Path:
    """report.html: model facts, then one section per analysis, every figure inlined as base64 PNG."""
    facts = result.metrics["model"]
    versions = result.metrics["versions"]
    title = f"Positional analysis of {facts['id']}"
    bodies = _section_bodies(result, figures)
    summary = _table(
        ["model", "type", "layers", "heads", "position table", "TISA"],
        [
            [
                facts["id"],
                facts["model_type"],
                facts["num_layers"],
                facts["num_heads"],
                facts["position_table_length"],
                json.dumps(facts["tisa"]) if facts["tisa"] else "none",
            ]
        ],
    )
    version_line = ", ".join(f"{name} {value}" for name, value in versions.items())
    sections = "".join(
        f'<section id="{key}"><h2>{html.escape(heading)}</h2>{bodies[key]}</section>'
        for key, heading in SECTIONS.items()
    )
    page = (
        f'<!DOCTYPE html><html lang="en"><head><meta charset="utf-8"><title>{html.escape(title)}</title>'
        f"<style>{STYLE}</style></head><body><h1>{html.escape(title)}</h1>{summary}"
        f'<p class="note">{html.escape(version_line)}</p>{sections}</body></html>\n'
    )
    path = directory / REPORT_FILE
    path.write_text(page, encoding="utf-8")
    return path
