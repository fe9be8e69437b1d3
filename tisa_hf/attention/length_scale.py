"""The length-aware logit scale (`TisaConfig.length_scale_from`): queries of sequences longer than the length the
model was trained on are scaled by log(n) / log(L)."""

from __future__ import annotations

import math

import torch
from torch import nn

from ..errors import UsageError
from .sites import site_of


def length_scale_from(module: nn.Module) -> int | None:
    """The model's `TisaConfig.length_scale_from`."""
    return site_of(module).encoder.config.tisa.length_scale_from


def length_scaled_query(module: nn.Module, query: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The query, times log(n) / log(L) for each sequence of n > L unpadded tokens where the model's TISA settings
    ask for it (`TisaConfig.length_scale_from` = L), else the query itself.

    n is each sequence's count of keys it may attend to, read from the first query row of the padding mask (an
    encoder's mask is the same for every query row); without a mask every sequence has all its keys.
    """
    train_length = length_scale_from(module)
    if train_length is None or query.shape[2] <= train_length:
        return query
    if getattr(module, "is_causal", False):
        raise UsageError(
            "TisaConfig.length_scale_from scales by each sequence's length, which a decoder's causal queries do not "
            "share: set length_scale_from=None for a decoder (is_decoder=True)."
        )
    if getattr(module, "sliding_window", None) is not None:
        raise UsageError(
            "TisaConfig.length_scale_from reads each sequence's length from its mask's first row, which in a "
            "sliding-window layer (ModernBERT's local layers) holds the window, not the sequence: set "
            "length_scale_from=None for this model."
        )
    if mask is None:
        lengths = torch.full((query.shape[0],), query.shape[2], device=query.device)
    elif mask.dtype == torch.bool:
        lengths = mask[:, 0, 0, :].sum(-1)
    else:
        lengths = (mask[:, 0, 0, :] > torch.finfo(mask.dtype).min / 2).sum(-1)
    scale = (lengths.to(torch.float32).log() / math.log(train_length)).clamp(min=1.0)
    return query * scale.to(query.dtype)[:, None, None, None]
