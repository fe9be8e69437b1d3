"""BERT: `encoder.layer[i].attention.self` is layer i's self-attention."""

from __future__ import annotations

from transformers import BertConfig, BertModel, PreTrainedModel

from .base import AttentionSite, EncoderAdapter


class BertAdapter(EncoderAdapter):
    model_type = "bert"
    base_model_class = BertModel
    config_class = BertConfig

    def attention_sites(self, model: PreTrainedModel) -> list[AttentionSite]:
        return [AttentionSite(layer.attention.self, index) for index, layer in enumerate(model.encoder.layer)]
