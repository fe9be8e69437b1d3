"""Positional parameter counts (the TISA paper's table 2)."""

from __future__ import annotations

from dataclasses import dataclass

from transformers import PreTrainedModel

from .adapters import find_base_model
from .attaching import tisa_bias_module


@dataclass(frozen=True)
class PositionalParameterCount:
    """Parameters that carry position: TISA kernels and position embeddings.

    In `replace` mode the position table keeps its shape on disk but only its mean reaches the model, so it
    counts as one vector; rotary embeddings have no parameters.
    """

    tisa: int
    position_embeddings: int

    @property
    def total(self) -> int:
        return self.tisa + self.position_embeddings


def count_positional_parameters(model: PreTrainedModel) -> PositionalParameterCount:
    base, adapter = find_base_model(model)
    bias = tisa_bias_module(base)
    tisa = sum(p.numel() for p in bias.parameters()) if bias is not None else 0
    return PositionalParameterCount(
        tisa=tisa, position_embeddings=adapter.positions.positional_parameters(base, adapter)
    )
