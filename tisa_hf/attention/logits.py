"""What TISA's bias adds to the attention logits: their dtype, the bias merged with the padding mask, and attention
computed from the logits in plain operators."""

from __future__ import annotations

import torch
from torch import nn


def bias_dtype(query: torch.Tensor) -> torch.dtype:
    """The dtype of the attention logits: autocast's, where it is on, else the query's."""
    device_type = query.device.type
    if torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return query.dtype


def merge_bias(mask: torch.Tensor | None, bias: torch.Tensor) -> torch.Tensor:
    """An additive float mask holding `bias` where attention is allowed; broadcast over the batch if no mask."""
    if mask is None:
        return bias
    if mask.dtype == torch.bool:
        return torch.where(mask, bias, torch.finfo(bias.dtype).min)
    return (mask + bias).to(bias.dtype)


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
