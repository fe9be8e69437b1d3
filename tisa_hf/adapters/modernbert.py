"""ModernBERT: one fused query-key-value projection (`layers[i].attn.Wqkv`), and global and sliding-window local
layers with a rotary base each (`config.layer_types`; the rotary module takes the layer type). The local layers'
window is in the mask the model builds for them, which every TISA route keeps (`attention/`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from .rotary import RotaryAdapter

if TYPE_CHECKING:
    import torch
    from torch import nn
    from transformers import PreTrainedModel


class ModernBertAdapter(RotaryAdapter):
    model_type = "modernbert"
    base_model_class_name = "ModernBertModel"
    transformers_release = "4.48.0"

    def attention_modules(self, model: PreTrainedModel) -> list[nn.Module]:
        return [layer.attn for layer in model.layers]

    def query_key(self, attention: nn.Module, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        states = attention.Wqkv(hidden).unflatten(-1, (3, -1, attention.head_dim))
        query, key, _ = states.unbind(dim=-3)
        return query.transpose(1, 2), key.transpose(1, 2)

    def rotation(
        self, model: PreTrainedModel, attention: nn.Module, hidden: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        layer_type = model.config.layer_types[attention.layer_idx]
        return self.rotary_module(model).forward(hidden, positions, layer_type)
