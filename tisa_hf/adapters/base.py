"""What TISA needs to know about one encoder architecture."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from transformers import PreTrainedModel

LAYER_INDEX_KWARG = "tisa_layer_index"


@dataclass(frozen=True)
class AttentionSite:
    """A self-attention module and the TISA layer it serves.

    `layer` is fixed for unshared modules; for modules shared across layers (ALBERT) it is None, and the
    encoder passes `tisa_layer_index` with each call, to which the site adds `offset`.
    """

    module: nn.Module
    layer: int | None
    offset: int = 0


class EncoderAdapter:
    """Per-architecture glue. Subclasses name the base model class and where its parts live."""

    model_type: str
    base_model_class: type[PreTrainedModel]

    def embeddings(self, model: PreTrainedModel) -> nn.Module:
        return model.embeddings

    def position_row_offset(self, model: PreTrainedModel) -> int:
        """First row of the position table that real tokens use (RoBERTa skips its padding rows)."""
        return 0

    def num_tisa_layers(self, model: PreTrainedModel) -> int:
        return model.config.num_hidden_layers

    def attention_sites(self, model: PreTrainedModel) -> list[AttentionSite]:
        raise NotImplementedError

    def prepare(self, model: PreTrainedModel) -> None:
        """Structural changes the attention sites rely on (ALBERT passes its layer index down)."""

    def encoder_input(self, model: PreTrainedModel, embeddings: torch.Tensor) -> torch.Tensor:
        """Turns the embedding output into what the first layer's attention sees (ALBERT projects it)."""
        return embeddings

    def run_encoder(self, model: PreTrainedModel, embeddings: torch.Tensor) -> None:
        """Runs the layers on an embedding output, without a mask."""
        model.encoder(embeddings)
