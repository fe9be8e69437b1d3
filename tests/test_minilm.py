"""Integration tests on the real pretrained BERT of the packaged MiniLM (offline)."""

from __future__ import annotations

import json
import logging

import pytest
import torch
from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer

import tisa_hf
from tests.fixtures import requires_extra
from tisa_hf import attaching
from tisa_hf.commands import cli

pytestmark = pytest.mark.core


@pytest.fixture(scope="module")
def fitted(minilm):
    return AutoModelForSequenceClassification.from_pretrained(
        minilm, num_labels=2, tisa=tisa_hf.TisaConfig(num_kernels=5)
    ).eval()


def test_first_layer_profile_matches_the_appendix_c_formula(minilm):
    model = AutoModel.from_pretrained(minilm)
    profiles = tisa_hf.extract_positional_profiles(model, length=64)
    emb = model.embeddings
    x = emb.word_embeddings.weight.mean(0) + emb.position_embeddings.weight[:64] + emb.token_type_embeddings.weight[0]
    x = torch.nn.functional.layer_norm(x, (384,), emb.LayerNorm.weight, emb.LayerNorm.bias, eps=1e-12)
    attention = model.encoder.layer[0].attention.self
    q = (x @ attention.query.weight.T + attention.query.bias).view(64, 12, 32).transpose(0, 1)
    k = (x @ attention.key.weight.T + attention.key.bias).view(64, 12, 32).transpose(0, 1)
    torch.testing.assert_close(profiles.logits[0], q @ k.transpose(1, 2) / 32**0.5, atol=1e-4, rtol=1e-4)
    assert profiles.logits.shape == (6, 12, 64, 64)


def test_pretrained_profiles_are_far_more_toeplitz_than_shuffled_positions(minilm):
    profiles = tisa_hf.extract_positional_profiles(AutoModel.from_pretrained(minilm), length=128)
    order = torch.randperm(128)
    shuffled = tisa_hf.toeplitz_fit(profiles.logits[..., order, :][..., order])
    assert profiles.toeplitz.r2.median() > shuffled.r2.median() + 0.2


def test_fitted_kernels_follow_the_profiles(fitted):
    config = tisa_hf.tisa_config_of(fitted)
    profiles = tisa_hf.extract_positional_profiles(fitted)
    window = config.fit_window
    offsets = torch.arange(-window, window + 1)
    length = profiles.length
    target = profiles.toeplitz.profile[..., length - 1 - window : length + window]
    values = fitted.base_model.tisa.scoring_function(offsets.float()).detach()
    r2 = tisa_hf.fitting.scoring_function_r2(target, values, (length - offsets.abs()).double())
    assert r2.shape == (6, 12)
    assert r2.median() > 0.9


def test_fitted_kernels_are_bounded_and_stay_flat_past_the_window(fitted):
    """No pairs of huge cancelling kernels: f stays on the profile's scale at every offset of the 512 positions."""
    window = tisa_hf.tisa_config_of(fitted).fit_window
    bias = fitted.base_model.tisa
    assert bias.sharpness.detach().abs().min() >= 1 / window**2 - 1e-9  # kernels at most W wide
    assert bias.center.detach().abs().max() <= window + 1e-4
    profiles = tisa_hf.extract_positional_profiles(fitted)
    length = profiles.length
    inside = profiles.toeplitz.profile[..., length - 1 - window : length + window]
    spread = inside.amax(-1) - inside.amin(-1)
    assert (bias.amplitude.detach().abs().sum(-1) <= 5 * spread).all()
    values = bias.scoring_function(torch.arange(1 - length, length).float()).detach()
    centred = values - values[..., length - 1 - window : length + window].mean(-1, keepdim=True)
    assert (centred.abs().amax(-1) <= 2 * spread).all()


def test_save_reload_gives_identical_logits_without_refit(fitted, minilm, tmp_path, monkeypatch):
    fitted.save_pretrained(tmp_path)
    monkeypatch.setattr(attaching, "fit_kernels", lambda *a, **k: pytest.fail("refitted"))
    again = AutoModelForSequenceClassification.from_pretrained(tmp_path).eval()
    tokenizer = AutoTokenizer.from_pretrained(minilm)
    batch = tokenizer(["a short one", "and a somewhat longer second sentence here"], padding=True, return_tensors="pt")
    with torch.no_grad():
        torch.testing.assert_close(again(**batch).logits, fitted(**batch).logits, rtol=0, atol=0)


def test_replace_mode_reads_inputs_four_times_the_table(minilm):
    model = AutoModel.from_pretrained(minilm, tisa={"num_kernels": 5, "mode": "replace", "fit_restarts": 2}).eval()
    input_ids = torch.randint(1000, 30000, (1, 2048))
    with torch.no_grad():
        hidden = model(input_ids=input_ids).last_hidden_state
    assert hidden.shape == (1, 2048, 384) and torch.isfinite(hidden).all()


@requires_extra("analysis")
def test_demo_runs_offline_end_to_end(minilm, tmp_path, caplog, capsys):
    import matplotlib.image

    from tisa_hf.analysis.plots import FIGURE_DPI, FIGURE_WIDTH
    from tisa_hf.commands import demo

    assert demo.main(["--out", str(tmp_path), "--kernels", "3"]) == 0
    assert not [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]
    assert "under a new 2-class head (random: the demo checks that saving keeps the logits" in capsys.readouterr().out
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert summary["reload_max_logit_difference"] == 0.0
    assert summary["positional_parameters"] == {"tisa": 3 * 3 * 12 * 6, "position_embeddings": 512 * 384}
    assert summary["mean_fit_r2"] > 0.8
    assert (tmp_path / "tisa_profiles.png").stat().st_size > 10_000
    height, width, _ = matplotlib.image.imread(tmp_path / "tisa_profiles.png").shape
    assert width == round(FIGURE_WIDTH * FIGURE_DPI) and height > width  # 6 layers of 12 heads, 6 panels a row
    assert cli.main(["demo", "--out", str(tmp_path), "--mode", "replace"]) == 2  # finished work is kept
    assert capsys.readouterr().err == (
        f"tisa-hf demo: --out {tmp_path} holds a finished demo (summary.json); choose another --out or pass "
        "--overwrite.\n"
    )
    assert json.loads((tmp_path / "summary.json").read_text()) == summary


@requires_extra("analysis")
def test_demo_with_no_kernels_plots_the_profiles_alone_and_still_checks_the_reload(minilm, tmp_path, capsys):
    """S = 0 in replace mode, the bag of words the README names: nothing to fit, the rest of the demo runs."""
    import matplotlib.image

    from tisa_hf.analysis.plots import FIGURE_DPI, FIGURE_WIDTH

    assert cli.main(["demo", "--out", str(tmp_path), "--kernels", "0", "--mode", "replace"]) == 0
    printed = capsys.readouterr().out.splitlines()
    assert printed[0].startswith("Loaded minilm with TISA replace S=0 (no kernels to fit) in ")
    assert printed[1] == "Positional parameters: TISA 0, position embeddings 384"
    assert printed[2] == f"No kernels were fitted (S = 0), so F̂_P is plotted alone: {tmp_path / 'tisa_profiles.png'}"
    summary = json.loads((tmp_path / "summary.json").read_text())
    assert (summary["kernels_fitted"], summary["mean_fit_r2"], summary["reload_max_logit_difference"]) == (
        False,
        None,
        0.0,
    )
    height, width, _ = matplotlib.image.imread(tmp_path / "tisa_profiles.png").shape
    assert width == round(FIGURE_WIDTH * FIGURE_DPI) and height > width  # every head's profile
