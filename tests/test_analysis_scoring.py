"""f(k) against F̂_P: exact match gives R² 1, a fitted model reproduces the kernel fit's own R²."""

import pytest
import torch
from transformers import BertModel

import tisa_hf
from tests.fixtures import tiny_config
from tisa_hf.analysis.positional_attention import analyze_profiles, default_query_positions, select_layers
from tisa_hf.analysis.scoring import compare_scoring_to_fitted_profiles, compare_scoring_to_profiles


def tiny_bert(tisa=None) -> BertModel:
    torch.manual_seed(0)
    model = BertModel(tiny_config("bert", vocab_size=200, intermediate_size=64, max_position_embeddings=48)).eval()
    return tisa_hf.patch(model, tisa) if tisa else model


def test_unpatched_model_has_no_scoring_functions():
    model = tiny_bert()
    assert compare_scoring_to_profiles(model, analyze_profiles(model, 32)) is None


def test_fitted_kernels_reproduce_the_fit_r2():
    tisa = tisa_hf.TisaConfig(num_kernels=2, fit_window=12, profile_length=32, fit_restarts=2)
    model = tiny_bert(tisa)
    profiles = analyze_profiles(model, 32)
    comparison = compare_scoring_to_profiles(model, profiles)
    reference = tisa_hf.fit_kernels(profiles.toeplitz_profile, 2, window=12, restarts=2)
    assert comparison.offsets.tolist() == list(range(-12, 13))
    assert comparison.r2.shape == (3, 4)
    assert torch.allclose(comparison.r2, reference.r2, atol=1e-3)


def test_kernels_are_compared_with_the_profile_they_were_fitted_to_whatever_the_analysed_length():
    model = tiny_bert(tisa_hf.TisaConfig(num_kernels=2, fit_window=12, fit_restarts=2))  # fitted over all 48 rows
    fitted = compare_scoring_to_profiles(model, analyze_profiles(model, 48))
    short = compare_scoring_to_fitted_profiles(model, analyze_profiles(model, 16, layers=[1, 2]))
    assert (short.profile_length, short.layers) == (48, [1, 2])
    assert torch.equal(short.r2, fitted.r2[1:])
    mismatched = compare_scoring_to_profiles(model, analyze_profiles(model, 16, layers=[1, 2]))
    assert (mismatched.r2 - short.r2).abs().max() > 0.05  # the comparison the report used to make
    assert compare_scoring_to_fitted_profiles(tiny_bert(), analyze_profiles(tiny_bert(), 16)) is None


def test_exact_scoring_function_gives_r2_one():
    model = tiny_bert(tisa_hf.TisaConfig(num_kernels=2, fit_window=10, init="random"))
    profiles = analyze_profiles(model, 24, layers=[0, 2])
    bias = model.tisa
    offsets = torch.arange(-23, 24)
    with torch.no_grad():
        profiles.toeplitz_profile = bias.scoring_function(offsets)[[0, 2]] + 3.0
    comparison = compare_scoring_to_profiles(model, profiles)
    assert comparison.layers == [0, 2]
    assert torch.allclose(comparison.r2, torch.ones(2, 4), atol=1e-6)
    assert torch.allclose(comparison.scoring, comparison.profile, atol=1e-5)


def test_shared_functions_compare_with_the_mean_profile():
    model = tiny_bert(tisa_hf.TisaConfig(num_kernels=1, share_across_layers=True, fit_window=8, fit_restarts=1))
    profiles = analyze_profiles(model, 20)
    comparison = compare_scoring_to_profiles(model, profiles)
    assert comparison.layers == [0]
    expected = profiles.toeplitz_profile.mean(0)[:, 19 - 8 : 20 + 8]
    assert torch.allclose(comparison.profile[0], expected)


def test_layer_and_query_selection():
    assert select_layers(None, 3) == [0, 1, 2]
    assert select_layers([2, 0, 2], 3) == [0, 2]
    with pytest.raises(ValueError, match=r"Layer\(s\) \[5\] do not exist; this model has layers 0 .. 2"):
        select_layers([5], 3)
    assert default_query_positions(64) == [8, 16, 32, 48]
    profiles = analyze_profiles(tiny_bert(), 16, query_positions=[0, 15])
    assert profiles.sections.shape == (3, 4, 2, 16)
    assert torch.equal(profiles.sections[:, :, 1], profiles.logits[:, :, 15])
