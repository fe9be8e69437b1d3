"""TISA scoring functions f(k) of a patched model next to the F̂_P profiles they were fitted to (the TISA
paper's figure 3 right and figure 6)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from ..adapters import find_base_model
from ..attaching import tisa_bias_module, tisa_config_of
from ..fitting import scoring_function_r2
from ..profiles import default_profile_length
from .positional_attention import ProfileAnalysis, analyze_profiles


@dataclass
class ScoringComparison:
    """Over `offsets` (|k| <= window): f(k) plus the constant that best matches the profile (softmax ignores
    constants), the Toeplitz profile of F̂_P, and the weighted R² of f against it, each per layer and head."""

    layers: list[int]
    offsets: torch.Tensor
    scoring: torch.Tensor
    profile: torch.Tensor
    r2: torch.Tensor
    num_kernels: int
    profile_length: int


def compare_scoring_to_profiles(model: PreTrainedModel, profiles: ProfileAnalysis) -> ScoringComparison | None:
    """f(k) of every selected layer and head against its F̂_P profile; None when the model has no kernels.

    The R² weighs offset k by n - |k|, the number of entries on its diagonal, as the kernel fit does, over the
    fit window of the model's TISA config. Functions shared across layers are compared with the mean profile.
    """
    base, _ = find_base_model(model)
    bias = tisa_bias_module(base)
    config = tisa_config_of(model)
    if bias is None or config is None:
        return None
    length = profiles.logits.shape[-1]
    window = min(config.fit_window or length - 1, length - 1)
    offsets = torch.arange(-window, window + 1)
    profile = profiles.toeplitz_profile[..., length - 1 - window : length + window].double()
    with torch.no_grad():
        scoring = bias.scoring_function(offsets).double().cpu()
    if bias.num_layers == 1:
        layers = [0]
        profile = profile.mean(0, keepdim=True)
    else:
        layers = profiles.layers
        scoring = scoring[layers]
    weights = (length - offsets.abs()).double()
    r2 = scoring_function_r2(profile, scoring, weights)
    scoring = scoring + (weights * (profile - scoring)).sum(-1, keepdim=True) / weights.sum()
    return ScoringComparison(
        layers=layers,
        offsets=offsets,
        scoring=scoring.float(),
        profile=profile.float(),
        r2=r2.float(),
        num_kernels=bias.num_kernels,
        profile_length=length,
    )


def fit_profile_length(model: PreTrainedModel) -> int:
    """Positions of the F̂_P profile that `init="fit"` fits a TISA model's kernels to (`initialize_tisa`): its
    `profile_length`, else the default of `extract_positional_profiles`."""
    config = tisa_config_of(model)
    return (config.profile_length if config else None) or default_profile_length(model)


def compare_scoring_to_fitted_profiles(model: PreTrainedModel, profiles: ProfileAnalysis) -> ScoringComparison | None:
    """`compare_scoring_to_profiles` against the profile the kernel fit uses (`fit_profile_length`), extracted
    anew for the same layers where `profiles` covers another number of positions: the Toeplitz profile and the
    weights n - |k| depend on n, so kernels fitted over 512 positions compared with a 128-position profile score
    a low R² that says nothing about the fit."""
    if tisa_config_of(model) is None:
        return None
    length = fit_profile_length(model)
    if profiles.logits.shape[-1] != length:
        profiles = analyze_profiles(model, length, profiles.layers)
    return compare_scoring_to_profiles(model, profiles)
