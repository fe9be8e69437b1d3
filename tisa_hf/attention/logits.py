"""What TISA's bias adds to the attention logits: their dtype, and the bias merged with the padding mask."""

from __future__ import annotations

import torch


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
