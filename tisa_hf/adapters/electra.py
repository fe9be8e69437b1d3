"""ELECTRA: BERT's layers, with the embeddings projected to the hidden size when they are narrower."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .bert import BertAdapter

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel


class ElectraAdapter(BertAdapter):
    model_type = "electra"
    base_model_class_name = "ElectraModel"

    def encoder_input(self, model: PreTrainedModel, embedding_output: torch.Tensor) -> torch.Tensor:
        project = getattr(model, "embeddings_project", None)
        return project(embedding_output) if project is not None else embedding_output
