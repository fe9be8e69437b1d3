"""DistilBERT: no token types; `transformer.layer[i].attention` (q_lin, k_lin, v_lin) is layer i's attention."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import AttentionSite, EncoderAdapter

if TYPE_CHECKING:
    from torch import nn
    from transformers import PreTrainedModel


class DistilBertAdapter(EncoderAdapter):
    model_type = "distilbert"
    base_model_class_name = "DistilBertModel"

    def attention_sites(self, model: PreTrainedModel) -> list[AttentionSite]:
        return [AttentionSite(layer.attention, index) for index, layer in enumerate(model.transformer.layer)]

    def projections(self, attention: nn.Module) -> tuple[nn.Linear, nn.Linear, nn.Linear]:
        return attention.q_lin, attention.k_lin, attention.v_lin

    def run_encoder(self, model: PreTrainedModel, embedding_output) -> None:
        model.transformer(embedding_output)
