"""The RoPE encoders' common adapter: no position table, a rotary module on the encoder (`rotary_emb`), and each
layer's attention (`layers[i].self_attn`, with `q_proj` and `k_proj`) rotating its query and key before the attention
function, which TISA's sites then run with the bias. NomicBERT, GTE and EuroBERT are this layout; ModernBERT
differs in its fused projection and its two rotary bases."""

from __future__ import annotations

from typing import TYPE_CHECKING

import transformers
from packaging.version import Version

from .base import AttentionSite, EncoderAdapter
from .positions import RotaryPositions, TokenTypesForReplaceMode

if TYPE_CHECKING:
    import torch
    from torch import nn
    from transformers import PreTrainedModel


class RotaryAdapter(EncoderAdapter):
    positions = RotaryPositions()

    def rotary_module(self, model: PreTrainedModel) -> nn.Module:
        return model.rotary_emb

    def attention_modules(self, model: PreTrainedModel) -> list[nn.Module]:
        return [layer.self_attn for layer in model.layers]

    def attention_sites(self, model: PreTrainedModel) -> list[AttentionSite]:
        return [AttentionSite(module, index) for index, module in enumerate(self.attention_modules(model))]

    def query_key(self, attention: nn.Module, hidden: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """The query and key of `hidden`, (batch, heads, n, head_dim), before the rotation (EuroBERT's key may have
        fewer heads: its key-value groups)."""
        query = attention.q_proj(hidden).unflatten(-1, (-1, attention.head_dim)).transpose(1, 2)
        key = attention.k_proj(hidden).unflatten(-1, (-1, attention.head_dim)).transpose(1, 2)
        return query, key

    def rotation(
        self, model: PreTrainedModel, attention: nn.Module, hidden: torch.Tensor, positions: torch.Tensor
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """The cos and sin the model rotates `attention`'s query and key by at `positions` (its rotary module's
        own computation, past its hooks)."""
        return self.rotary_module(model).forward(hidden, positions)


class NomicBertPositions(RotaryPositions):
    """NomicBERT's rotary positions. Before transformers 5.17 its embeddings gather the token type ids a call does not
    give from a zero buffer of `max_position_embeddings` rows by position, so `replace` supplies those zeros itself,
    to read past the rotary range."""

    def apply_mode(self, base: PreTrainedModel, adapter: EncoderAdapter, mode: str) -> None:
        super().apply_mode(base, adapter, mode)
        if mode == "replace" and Version(transformers.__version__) < Version("5.17.0"):
            base.embeddings.register_forward_pre_hook(TokenTypesForReplaceMode(), with_kwargs=True)


class NomicBertAdapter(RotaryAdapter):
    model_type = "nomic_bert"
    positions = NomicBertPositions()
    base_model_class_name = "NomicBertModel"
    transformers_release = "5.5.0"


class GteAdapter(RotaryAdapter):
    model_type = "gte"
    base_model_class_name = "GteModel"
    transformers_release = "5.18.0"


class EuroBertAdapter(RotaryAdapter):
    model_type = "eurobert"
    base_model_class_name = "EuroBertModel"
    transformers_release = "5.3.0"
