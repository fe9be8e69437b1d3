"""Figures of an analysis, drawn with matplotlib's object-oriented API on the non-interactive Agg canvas."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from .pipeline import AnalysisResult
from .positional_attention import ProfileAnalysis
from .scoring import ScoringComparison

HEATMAP_PIXELS = 128
PROBING_PERCENTILE = 99
FIGURE_DPI = 110
# A per-head figure is as wide as the report's 1,200-pixel column shows it (1,144 pixels at FIGURE_DPI), so that it
# is never scaled down on a screen, and its smallest text is MIN_FONT points (11 pixels there): the size at which
# tick labels and R² values still read. Heads wrap onto rows of at most PANEL_COLUMNS panels to fit.
FIGURE_WIDTH = 10.4
MIN_FONT = 7
PANEL_COLUMNS = 6
PANEL_HEIGHT = 1.7
TOP_MARGIN, BOTTOM_MARGIN, LEFT_MARGIN = 0.95, 0.55, 0.75  # inches: title and legend, x label, y label


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


def _head_grid(
    layers: list[int], heads: int, title: str, xlabel: str, ylabel: str
) -> tuple[Figure, Callable[[int, int], Axes]]:
    """A panel for every layer and head, a layer's heads in order on rows of at most PANEL_COLUMNS, in a figure
    FIGURE_WIDTH wide (fixed layout: constrained layout is slow for many panels); returns the figure and the
    panel of (row of `layers`, head), each titled, with a few ticks in MIN_FONT."""
    columns = min(heads, PANEL_COLUMNS)
    rows_a_layer = -(-heads // columns)
    rows = len(layers) * rows_a_layer
    height = rows * PANEL_HEIGHT + TOP_MARGIN + BOTTOM_MARGIN
    figure = Figure(figsize=(FIGURE_WIDTH, height))
    axes = figure.subplots(rows, columns, squeeze=False)
    figure.subplots_adjust(
        left=LEFT_MARGIN / FIGURE_WIDTH,
        right=0.99,
        bottom=BOTTOM_MARGIN / height,
        top=1 - TOP_MARGIN / height,
        wspace=0.35,
        hspace=0.45,
    )
    figure.suptitle(title, y=1 - 0.1 / height, va="top", fontsize=MIN_FONT + 3)
    figure.supxlabel(xlabel, fontsize=MIN_FONT + 2)
    figure.supylabel(ylabel, fontsize=MIN_FONT + 2)
    for axis in axes.ravel():
        axis.set_visible(False)

    def panel(row: int, head: int) -> Axes:
        axis = axes[row * rows_a_layer + head // columns, head % columns]
        axis.set_visible(True)
        axis.set_title(f"layer {layers[row]}, head {head}", fontsize=MIN_FONT + 1, pad=3)
        axis.tick_params(labelsize=MIN_FONT, length=2, pad=1)
        axis.xaxis.set_major_locator(MaxNLocator(3))
        axis.yaxis.set_major_locator(MaxNLocator(3))
        return axis

    return figure, panel


def _figure_legend(figure: Figure, axis: Axes) -> None:
    """One legend for every panel, under the title (the panels draw the same lines)."""
    height = figure.get_figheight()
    handles, labels = axis.get_legend_handles_labels()
    figure.legend(
        handles,
        labels,
        loc="upper center",
        bbox_to_anchor=(0.5, 1 - 0.42 / height),
        ncols=min(len(labels), 6),
        fontsize=MIN_FONT + 1,
        frameon=False,
    )


def _r2_label(axis: Axes, r2: float) -> None:
    axis.text(
        0.03,
        0.04,
        f"R² {r2:.2f}",
        transform=axis.transAxes,
        fontsize=MIN_FONT,
        bbox={"facecolor": "white", "alpha": 0.7, "edgecolor": "none", "pad": 1},
    )


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
    figure, panel = _head_grid(
        profiles.layers,
        profiles.logits.shape[1],
        f"Positional attention profiles F̂_P over {length} positions (query-key logits of the mean word; colour: "
        "logit, nats; R²: Toeplitz fit)",
        "key position j (tokens)",
        "query position i (tokens)",
    )
    for row in range(len(profiles.layers)):
        for head in range(profiles.logits.shape[1]):
            axis, matrix = panel(row, head), profiles.logits[row, head]
            axis.imshow(_pooled(matrix), cmap="RdBu_r", extent=(0, length, length, 0), **_robust_limits(matrix))
            _r2_label(axis, profiles.r2[row, head])
    return figure


def profile_sections_figure(result: AnalysisResult) -> Figure:
    profiles = result.profiles
    length = profiles.logits.shape[-1]
    figure, panel = _head_grid(
        profiles.layers,
        profiles.logits.shape[1],
        f"Sections of F̂_P through the main diagonal over {length} positions, one line per query position i",
        "offset j - i (tokens)",
        "logit (nats)",
    )
    for row in range(len(profiles.layers)):
        for head in range(profiles.logits.shape[1]):
            axis = panel(row, head)
            for index, query in enumerate(profiles.query_positions):
                sections = profiles.sections[row, head, index].numpy()
                axis.plot(np.arange(length) - query, sections, lw=0.8, label=f"i = {query}")
    _figure_legend(figure, axis)
    return figure


def scoring_figure(result: AnalysisResult) -> Figure | None:
    return scoring_comparison_figure(result.scoring) if result.scoring is not None else None


def scoring_comparison_figure(scoring: ScoringComparison) -> Figure:
    """f(k) of every layer and head over the F̂_P profile it was fitted to, with the fit R², at the offsets the
    comparison covers (the fit window), which the title states."""
    window = int(scoring.offsets.abs().max())
    figure, panel = _head_grid(
        scoring.layers,
        scoring.scoring.shape[1],
        f"TISA scoring functions f(k) (S = {scoring.num_kernels}) and the Toeplitz profile of F̂_P "
        f"({scoring.profile_length} positions) at offsets |k| ≤ {window}",
        "offset k = j - i (tokens)",
        "logit (nats)",
    )
    offsets = scoring.offsets.numpy()
    for row in range(len(scoring.layers)):
        for head in range(scoring.scoring.shape[1]):
            axis = panel(row, head)
            axis.plot(offsets, scoring.profile[row, head].numpy(), color="0.55", lw=1.0, label="F̂_P profile")
            axis.plot(offsets, scoring.scoring[row, head].numpy(), color="C3", lw=1.0, label="f(k), fitted")
            axis.set_xlim(-window, window)
            _r2_label(axis, scoring.r2[row, head])
    _figure_legend(figure, axis)
    return figure


def toeplitz_profiles_figure(profiles: ProfileAnalysis) -> Figure:
    """The Toeplitz profile of F̂_P of every layer and head alone, at every offset: what a model without kernels
    (S = 0) shows in place of `scoring_comparison_figure`."""
    length = profiles.logits.shape[-1]
    offsets = np.arange(1 - length, length)
    figure, panel = _head_grid(
        profiles.layers,
        profiles.logits.shape[1],
        f"The Toeplitz profile of F̂_P ({length} positions); no TISA scoring functions (S = 0)",
        "offset k = j - i (tokens)",
        "logit (nats)",
    )
    for row in range(len(profiles.layers)):
        for head in range(profiles.logits.shape[1]):
            axis = panel(row, head)
            axis.plot(offsets, profiles.toeplitz_profile[row, head].numpy(), color="0.55", lw=1.0, label="F̂_P profile")
    _figure_legend(figure, axis)
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


def save_figures(result: AnalysisResult, directory: Path, dpi: int = FIGURE_DPI) -> dict[str, Path]:
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
