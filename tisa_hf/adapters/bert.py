"""BERT: `encoder.layer[i].attention.self` is layer i's self-attention."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .base import AttentionSite, EncoderAdapter

if TYPE_CHECKING:
    from transformers import PreTrainedModel


class BertAdapter(EncoderAdapter):
    model_type = "bert"
    base_model_class_name = "BertModel"

    def attention_sites(self, model: PreTrainedModel) -> list[AttentionSite]:
        return [AttentionSite(layer.attention.self, index) for index, layer in enumerate(model.encoder.layer)]
