"""ALBERT: one set of layer weights runs num_hidden_layers times, so the layer index travels with the call."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

from .base import LAYER_INDEX_KWARG, AttentionSite, EncoderAdapter

if TYPE_CHECKING:
    import torch
    from transformers import PreTrainedModel


@functools.cache
def tisa_albert_transformer() -> type:
    """`AlbertTransformer` that tells each group call which of the num_hidden_layers it is running (built on first
    use, so that naming the adapter imports no model code; pickle finds it by name through `__getattr__`)."""
    from transformers.modeling_outputs import BaseModelOutput
    from transformers.models.albert.modeling_albert import AlbertTransformer

    class TisaAlbertTransformer(AlbertTransformer):
        def forward(self, hidden_states: torch.Tensor, attention_mask: torch.Tensor | None = None, **kwargs):
            hidden_states = self.embedding_hidden_mapping_in(hidden_states)
            inner = self.config.inner_group_num
            layers_per_group = self.config.num_hidden_layers / self.config.num_hidden_groups
            for index in range(self.config.num_hidden_layers):
                group = self.albert_layer_groups[int(index / layers_per_group)]
                hidden_states = group(hidden_states, attention_mask, **{LAYER_INDEX_KWARG: index * inner}, **kwargs)
            return BaseModelOutput(last_hidden_state=hidden_states)

    TisaAlbertTransformer.__qualname__ = TisaAlbertTransformer.__name__
    return TisaAlbertTransformer


def __getattr__(name: str) -> type:
    if name == "TisaAlbertTransformer":
        return tisa_albert_transformer()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


class AlbertAdapter(EncoderAdapter):
    model_type = "albert"
    base_model_class_name = "AlbertModel"

    def num_tisa_layers(self, model: PreTrainedModel) -> int:
        return model.config.num_hidden_layers * model.config.inner_group_num

    def attention_sites(self, model: PreTrainedModel) -> list[AttentionSite]:
        return [
            AttentionSite(layer.attention, None, offset)
            for group in model.encoder.albert_layer_groups
            for offset, layer in enumerate(group.albert_layers)
        ]

    def prepare(self, model: PreTrainedModel) -> None:
        model.encoder.__class__ = tisa_albert_transformer()

    def encoder_input(self, model: PreTrainedModel, embedding_output: torch.Tensor) -> torch.Tensor:
        return model.encoder.embedding_hidden_mapping_in(embedding_output)

    def run_encoder(self, model: PreTrainedModel, embedding_output: torch.Tensor) -> None:
        model.encoder(embedding_output)  # the encoder projects its input itself
