"""RoBERTa: BERT's layout, with position rows 0 .. padding_idx reserved for padding."""

from __future__ import annotations

from transformers import PreTrainedModel, RobertaConfig, RobertaModel

from .bert import BertAdapter


class RobertaAdapter(BertAdapter):
    model_type = "roberta"
    base_model_class = RobertaModel
    config_class = RobertaConfig

    def position_row_offset(self, model: PreTrainedModel) -> int:
        return model.embeddings.padding_idx + 1
