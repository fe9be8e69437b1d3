"""RoBERTa: BERT's layout, with position rows 0 .. padding_idx reserved for padding."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .bert import BertAdapter

if TYPE_CHECKING:
    from transformers import PreTrainedModel


class RobertaAdapter(BertAdapter):
    model_type = "roberta"
    base_model_class_name = "RobertaModel"

    def position_row_offset(self, model: PreTrainedModel) -> int:
        return model.embeddings.padding_idx + 1
