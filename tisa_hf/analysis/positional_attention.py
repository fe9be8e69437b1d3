"""Positional attention profiles F̂_P (the TISA paper's section 3.2, figures 3, 6, 7, 8), from the extraction
the initializer uses (`tisa_hf.extract_positional_profiles`)."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import PreTrainedModel

from ..errors import UsageError
from ..profiles import extract_positional_profiles


@dataclass
class ProfileAnalysis:
    """F̂_P of the selected layers, (L, H, n, n), with their Toeplitz profiles and R² (L, H)."""

    layers: list[int]
    logits: torch.Tensor
    toeplitz_profile: torch.Tensor
    r2: torch.Tensor
    query_positions: list[int]

    @property
    def sections(self) -> torch.Tensor:
        """(L, H, Q, n): the rows of F̂_P at each query position."""
        return self.logits[:, :, self.query_positions, :]


def default_query_positions(length: int) -> list[int]:
    """Four queries spread over the sequence: 1/8, 1/4, 1/2 and 3/4 of the way."""
    return sorted({min(length - 1, round(length * share)) for share in (1 / 8, 1 / 4, 1 / 2, 3 / 4)})


def select_layers(layers: list[int] | None, num_layers: int) -> list[int]:
    """The layers asked for (all when None), checked against the model."""
    if layers is None:
        return list(range(num_layers))
    wrong = [layer for layer in layers if not 0 <= layer < num_layers]
    if wrong:
        raise UsageError(f"Layer(s) {wrong} do not exist; this model has layers 0 .. {num_layers - 1}.")
    return sorted(set(layers))


def analyze_profiles(
    model: PreTrainedModel,
    length: int,
    layers: list[int] | None = None,
    query_positions: list[int] | None = None,
) -> ProfileAnalysis:
    """F̂_P over `length` positions, restricted to `layers` (all when None)."""
    profiles = extract_positional_profiles(model, length=length)
    chosen = select_layers(layers, profiles.logits.shape[0])
    query_positions = query_positions or default_query_positions(length)
    if any(not 0 <= q < length for q in query_positions):
        raise UsageError(f"Query positions {query_positions} must lie in 0 .. {length - 1}.")
    return ProfileAnalysis(
        layers=chosen,
        logits=profiles.logits[chosen],
        toeplitz_profile=profiles.toeplitz.profile[chosen].float(),
        r2=profiles.toeplitz.r2[chosen].float(),
        query_positions=list(query_positions),
    )
