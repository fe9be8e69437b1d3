"""Figures of an analysis, drawn with matplotlib's object-oriented API on the non-interactive Agg canvas."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from .pipeline import AnalysisResult
from .scoring import ScoringComparison

HEATMAP_PIXELS = 128
PROBING_PERCENTILE = 99
PANEL_SIZE = (1.7, 1.5)


def _pooled(matrix: torch.Tensor, pixels: int = HEATMAP_PIXELS) -> np.ndarray:
    """A large heat map averaged down to at most `pixels` per side, for drawing."""
    factor = max(1, int(np.ceil(matrix.shape[-1] / pixels)))
    if factor == 1:
        return matrix.numpy()
    return torch.nn.functional.avg_pool2d(matrix[None].float(), factor, ceil_mode=True)[0].numpy()


def _robust_limits(matrix: torch.Tensor) -> dict[str, float]:
    """Colour limits at the 1st and 99th percentiles, so that one outlying position (often 0) does not wash out
    the rest of a heat map."""
    low, high = torch.quantile(matrix.flatten().float(), torch.tensor([0.01, 0.99])).tolist()
    return {"vmin": low, "vmax": high}


def _panel_grid(rows: int, cols: int, title: str, xlabel: str, ylabel: str) -> tuple[Figure, np.ndarray]:
    """A rows × cols grid of small panels with a fixed layout (constrained layout is slow for many panels)."""
    width, height = max(4.0, cols * PANEL_SIZE[0] + 0.6), max(3.0, rows * PANEL_SIZE[1] + 0.8)
    figure = Figure(figsize=(width, height))
    axes = figure.subplots(rows, cols, squeeze=False)
    margin = 0.6 / height
    figure.subplots_adjust(left=0.8 / width, right=0.99, bottom=margin, top=1 - margin, wspace=0.45, hspace=0.6)
    figure.suptitle(title)
    figure.supxlabel(xlabel)
    figure.supylabel(ylabel)
    return figure, axes


def _each_head(axes: np.ndarray, layers: list[int], draw: Callable[[Axes, int, int], None]) -> None:
    for row, layer in enumerate(layers):
        for head in range(axes.shape[1]):
            axis = axes[row, head]
            draw(axis, row, head)
            axis.set_title(f"layer {layer}, head {head}", fontsize=6)
            axis.tick_params(labelsize=5)


def gram_figure(result: AnalysisResult) -> Figure:
    """P over all analysed positions and, when that is longer, over the first `prefix_length` (one panel when
    they coincide)."""
    gram = result.gram
    panels = [(gram.gram, f"all {gram.gram.shape[0]} positions, Toeplitz R² {gram.r2:.3f}")]
    if gram.prefix_length < gram.gram.shape[0]:
        prefix = gram.gram[: gram.prefix_length, : gram.prefix_length]
        panels.append((prefix, f"first {gram.prefix_length} positions, Toeplitz R² {gram.prefix_r2:.3f}"))
    figure = Figure(figsize=(5 * len(panels), 4.5), layout="constrained")
    figure.suptitle("Position embedding inner products P = E_P E_P^T")
    for axis, (matrix, label) in zip(np.atleast_1d(figure.subplots(1, len(panels))), panels, strict=True):
        length = matrix.shape[0]
        image = axis.imshow(_pooled(matrix), cmap="viridis", extent=(0, length, length, 0), **_robust_limits(matrix))
        axis.set_title(label, fontsize=9)
        axis.set_xlabel("position j (tokens)")
        axis.set_ylabel("position i (tokens)")
        figure.colorbar(image, ax=axis, label="inner product (embedding units², 1st-99th percentile)")
    return figure


def profile_heatmaps_figure(result: AnalysisResult) -> Figure:
    profiles = result.profiles
    length = profiles.logits.shape[-1]
    figure, axes = _panel_grid(
        len(profiles.layers),
        profiles.logits.shape[1],
        "Positional attention profiles F̂_P (query-key logits of the mean word; colour: logit, nats)",
        "key position j (tokens)",
        "query position i (tokens)",
    )

    def draw(axis: Axes, row: int, head: int) -> None:
        matrix = profiles.logits[row, head]
        axis.imshow(_pooled(matrix), cmap="RdBu_r", extent=(0, length, length, 0), **_robust_limits(matrix))
        axis.text(0.02, 0.02, f"R² {profiles.r2[row, head]:.2f}", transform=axis.transAxes, fontsize=5)

    _each_head(axes, profiles.layers, draw)
    return figure


def profile_sections_figure(result: AnalysisResult) -> Figure:
    profiles = result.profiles
    length = profiles.logits.shape[-1]
    figure, axes = _panel_grid(
        len(profiles.layers),
        profiles.logits.shape[1],
        "Sections of F̂_P through the main diagonal, one line per query position i",
        "offset j - i (tokens)",
        "logit (nats)",
    )
    sections = profiles.sections

    def draw(axis: Axes, row: int, head: int) -> None:
        for index, query in enumerate(profiles.query_positions):
            axis.plot(np.arange(length) - query, sections[row, head, index].numpy(), lw=0.6, label=f"i = {query}")

    _each_head(axes, profiles.layers, draw)
    axes[0, 0].legend(fontsize=4)
    return figure


def scoring_figure(result: AnalysisResult) -> Figure | None:
    return scoring_comparison_figure(result.scoring) if result.scoring is not None else None


def scoring_comparison_figure(scoring: ScoringComparison) -> Figure:
    """f(k) of every layer and head over the F̂_P profile it was fitted to, with the fit R²."""
    figure, axes = _panel_grid(
        len(scoring.layers),
        scoring.scoring.shape[1],
        f"TISA scoring functions f(k) (S = {scoring.num_kernels}) against the F̂_P profile over "
        f"{scoring.profile_length} positions",
        "offset k = j - i (tokens)",
        "logit (nats)",
    )
    offsets = scoring.offsets.numpy()

    def draw(axis: Axes, row: int, head: int) -> None:
        axis.plot(offsets, scoring.profile[row, head].numpy(), color="0.6", lw=0.8, label="F̂_P profile")
        axis.plot(offsets, scoring.scoring[row, head].numpy(), color="C3", lw=0.8, label="f(k)")
        axis.text(0.02, 0.02, f"R² {scoring.r2[row, head]:.2f}", transform=axis.transAxes, fontsize=5)

    _each_head(axes, scoring.layers, draw)
    axes[0, 0].legend(fontsize=4)
    return figure


def probing_limits(maps: list[np.ndarray]) -> dict[str, float]:
    """One colour scale for every head: 0 to the 99th percentile of all drawn values. Each map's own range is
    set by a few very large probabilities (often on [CLS] or [SEP]), which leaves the rest of the map black."""
    return {"vmin": 0.0, "vmax": float(np.percentile(np.stack(maps), PROBING_PERCENTILE))}


def probing_figure(result: AnalysisResult) -> Figure:
    probing = result.probing
    heads, length = probing.attention.shape[0], probing.attention.shape[-1]
    cols = min(heads, 6)
    rows = -(-heads // cols) + 1
    figure = Figure(figsize=(cols * 1.9, rows * 1.9 + 0.6), layout="constrained")
    figure.suptitle(f"Identical-word probing: first-layer attention on {length} × '{probing.word}'")
    grid = figure.add_gridspec(rows, cols)
    maps = [_pooled(probing.attention[head]) for head in range(heads)]
    limits = probing_limits(maps)
    for head in range(heads):
        axis = figure.add_subplot(grid[head // cols, head % cols])
        image = axis.imshow(maps[head], cmap="magma", extent=(0, length, length, 0), **limits)
        axis.set_title(f"head {head}", fontsize=7)
        axis.set_xlabel("key position (tokens)", fontsize=6)
        axis.set_ylabel("query position (tokens)", fontsize=6)
        axis.tick_params(labelsize=5)
    scale = f"attention probability\n(all heads, 0 to {PROBING_PERCENTILE}th percentile)"
    figure.colorbar(image, ax=figure.axes, label=scale, shrink=0.8)
    bars = figure.add_subplot(grid[-1, :])
    names = ("aiv", "opr", "opr_local", "sd", "db")
    width = 0.8 / len(names)
    for index, name in enumerate(names):
        bars.bar(np.arange(heads) + index * width, getattr(probing, name).numpy(), width, label=name.upper())
    bars.set_xticks(np.arange(heads) + 0.4 - width / 2, [str(h) for h in range(heads)])
    bars.set_xlabel("head")
    bars.set_ylabel("indicator (dimensionless)")
    bars.set_title("Property indicators per head", fontsize=8)
    bars.legend(fontsize=6, ncols=len(names))
    return figure


def spectrum_figure(result: AnalysisResult) -> Figure:
    spectrum = result.spectrum
    frequencies = spectrum.frequencies.numpy()[1:]
    low, median, high = spectrum.quantiles().numpy()[:, 1:]
    figure = Figure(figsize=(10, 4), layout="constrained")
    figure.suptitle("Spectral view of the position embeddings")
    left, right = figure.subplots(1, 2)
    left.fill_between(frequencies, low, high, alpha=0.3, label="quartiles over dimensions")
    left.plot(frequencies, median, lw=0.8, label="median")
    left.plot(frequencies, spectrum.mean.numpy()[1:], lw=0.8, label="mean")
    left.set_yscale("log")
    left.set_xlabel("frequency (cycles per position)")
    left.set_ylabel("DFT amplitude (embedding units)")
    left.set_title("Amplitude spectrum of each dimension over positions", fontsize=9)
    left.legend(fontsize=7)
    cumulative = result.cumulative_variance
    right.plot(np.arange(1, len(cumulative) + 1), cumulative)
    right.set_xscale("log")
    right.set_xlabel("principal components (count)")
    right.set_ylabel("cumulative share of variance (fraction)")
    right.set_title("PCA of E_P", fontsize=9)
    right.grid(alpha=0.3)
    return figure


def traces_figure(result: AnalysisResult) -> Figure:
    traces = result.traces
    offsets = result.metrics["trace_vectors"]["offsets"]
    layers = result.profiles.layers
    cols = min(len(layers), 3)
    rows = -(-len(layers) // cols)
    figure = Figure(figsize=(cols * 3.6, rows * 2.8 + 0.5), layout="constrained")
    figure.suptitle("t-offset trace vectors on real text (mean attention to the token t places away)")
    axes = np.atleast_1d(figure.subplots(rows, cols, squeeze=False)).ravel()
    for axis, row, layer in zip(axes, range(len(layers)), layers, strict=False):
        image = axis.imshow(
            traces[row].numpy(),
            cmap="Greens",
            aspect="auto",
            vmin=0,
            extent=(offsets[0] - 0.5, offsets[-1] + 0.5, traces.shape[1] - 0.5, -0.5),
        )
        axis.set_title(f"layer {layer}", fontsize=8)
        axis.set_xlabel("offset t (tokens)", fontsize=7)
        axis.set_ylabel("head", fontsize=7)
        figure.colorbar(image, ax=axis, label="tr_t(A) (probability)")
    for axis in axes[len(layers) :]:
        axis.set_visible(False)
    return figure


def variance_figure(result: AnalysisResult) -> Figure:
    variance = result.variance
    figure = Figure(figsize=(6, 4.5), layout="constrained")
    axis = figure.subplots()
    positions = variance.positions.numpy()
    axis.loglog(
        positions, variance.bidirectional.numpy(), label=f"bidirectional (slope {variance.bidirectional_slope:.2f})"
    )
    axis.loglog(positions, variance.causal.numpy(), label=f"causal mask (slope {variance.causal_slope:.2f})")
    axis.set_title("Variance of the position-free first-layer attention output")
    axis.set_xlabel("position (tokens, from 1)")
    axis.set_ylabel("variance (hidden units²)")
    axis.legend()
    axis.grid(alpha=0.3, which="both")
    return figure


FIGURES: dict[str, Callable[[AnalysisResult], Figure | None]] = {
    "position_gram": gram_figure,
    "profile_heatmaps": profile_heatmaps_figure,
    "profile_sections": profile_sections_figure,
    "scoring_functions": scoring_figure,
    "probing": probing_figure,
    "spectrum": spectrum_figure,
    "trace_vectors": traces_figure,
    "attention_variance": variance_figure,
}


def save_figures(result: AnalysisResult, directory: Path, dpi: int = 110) -> dict[str, Path]:
    """Draws every figure the result has and saves it as `directory/NAME.png`; removes the file of a figure it
    lacks (no scoring functions without TISA), which an earlier report in `directory` may have left, so that the
    folder holds this report's figures only."""
    directory.mkdir(parents=True, exist_ok=True)
    paths = {}
    for name, draw in FIGURES.items():
        path = directory / f"{name}.png"
        figure = draw(result)
        if figure is None:
            path.unlink(missing_ok=True)
            continue
        paths[name] = path
        figure.savefig(path, dpi=dpi)
    return paths
