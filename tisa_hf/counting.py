"""Positional parameter counts (the TISA paper's table 2)."""

from __future__ import annotations

from dataclasses import dataclass

from transformers import PreTrainedModel

from .adapters import find_base_model
from .attaching import MeanPositionEmbedding, tisa_bias_module


@dataclass(frozen=True)
class PositionalParameterCount:
    """Parameters that carry position: TISA kernels and position embeddings.

    In `replace` mode the position table keeps its shape on disk but only its mean reaches the model, so it
    counts as one vector.
    """

    tisa: int
    position_embeddings: int

    @property
    def total(self) -> int:
        return self.tisa + self.position_embeddings


def count_positional_parameters(model: PreTrainedModel) -> PositionalParameterCount:
    base, adapter = find_base_model(model)
    table = adapter.position_table(base)
    bias = tisa_bias_module(base)
    tisa = sum(p.numel() for p in bias.parameters()) if bias is not None else 0
    if isinstance(table, MeanPositionEmbedding):
        return PositionalParameterCount(tisa=tisa, position_embeddings=table.embedding_dim)
    return PositionalParameterCount(tisa=tisa, position_embeddings=table.weight.numel())
