"""ELECTRA: BERT's layers, with the embeddings projected to the hidden size when they are narrower."""

from __future__ import annotations

import torch
from transformers import ElectraConfig, ElectraModel, PreTrainedModel

from .bert import BertAdapter


class ElectraAdapter(BertAdapter):
    model_type = "electra"
    base_model_class = ElectraModel
    config_class = ElectraConfig

    def encoder_input(self, model: PreTrainedModel, embedding_output: torch.Tensor) -> torch.Tensor:
        project = getattr(model, "embeddings_project", None)
        return project(embedding_output) if project is not None else embedding_output
