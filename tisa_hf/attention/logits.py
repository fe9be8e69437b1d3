"""What TISA's bias adds to the attention logits: their dtype, the bias rows of a call's queries, the causal mask a
call without one needs, the bias merged with the padding mask, and attention computed from the logits in plain
operators."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from torch import nn
from transformers.integrations.sdpa_attention import repeat_kv

if TYPE_CHECKING:
    from ..kernels import TisaPositionBias


def bias_dtype(query: torch.Tensor) -> torch.dtype:
    """The dtype of the attention logits: autocast's, where it is on, else the query's."""
    device_type = query.device.type
    if torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return query.dtype


def key_value_per_head(module: nn.Module, key: torch.Tensor, value: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The key and value of every query head: an encoder with grouped key-value heads (EuroBERT's
    `num_key_value_groups`) has each serve several query heads, as transformers' own functions repeat them."""
    groups = getattr(module, "num_key_value_groups", 1)
    return repeat_kv(key, groups), repeat_kv(value, groups)


def merge_bias(mask: torch.Tensor | None, bias: torch.Tensor) -> torch.Tensor:
    """An additive float mask holding `bias` where attention is allowed; broadcast over the batch if no mask."""
    if mask is None:
        return bias
    if mask.dtype == torch.bool:
        return torch.where(mask, bias, torch.finfo(bias.dtype).min)
    return (mask + bias).to(bias.dtype)


def masks_causally_itself(
    module: nn.Module | None, is_causal: bool | None, mask: torch.Tensor | None, query: torch.Tensor
) -> bool:
    """Whether a call must add the causal mask itself: a decoder's self-attention (the call's `is_causal`, else the
    module's, as transformers' sdpa reads it) of several queries to which transformers hands no mask, leaving the
    causality to SDPA's `is_causal`, which a bias stored in the mask replaces."""
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", False)
    return bool(causal) and mask is None and query.shape[2] > 1


def causally_masked(bias: torch.Tensor, query_start: int) -> torch.Tensor:
    """`bias` (..., q, k) with each query's logits of later keys at the dtype's minimum (query i sits at position
    `query_start` + i of the keys)."""
    queries, keys = bias.shape[-2:]
    key_positions = torch.arange(keys, device=bias.device)
    query_positions = torch.arange(queries, device=bias.device) + query_start
    allowed = key_positions[None, :] <= query_positions[:, None]
    return torch.where(allowed, bias, torch.finfo(bias.dtype).min)


def biased_mask(
    kernels: TisaPositionBias,
    layer: int,
    query: torch.Tensor,
    key: torch.Tensor,
    mask: torch.Tensor | None,
    causal: bool,
) -> torch.Tensor:
    """The additive mask of a call: the layer's bias rows of its queries, the last q of the k key positions (a step on
    a KV cache attends to the cached keys too), causally masked where `causal`, merged with the padding mask."""
    queries, keys = query.shape[2], key.shape[2]
    bias = kernels.rows(layer, queries, keys, bias_dtype(query))
    if causal:
        bias = causally_masked(bias, keys - queries)
    return merge_bias(mask, bias)


def math_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    scaling: float | None,
    dropout: float,
    training: bool,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q kᵀ · scaling + mask) v in plain operators: the output (B, n, H, d) and the probabilities. transformers
    has no shared eager function (each model file has its own copy); this is that same computation."""
    scaling = scaling if scaling is not None else query.shape[-1] ** -0.5
    weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    if mask is not None:
        weights = weights + mask
    weights = nn.functional.dropout(weights.softmax(-1), p=dropout, training=training)
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights
