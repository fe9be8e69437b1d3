"""The SDPA backend PyTorch picks for a call, as `tisa-hf env` names it."""

from __future__ import annotations

import torch
from torch.nn.attention import SDPBackend

_SDPA_BACKENDS = {
    int(backend): name
    for backend, name in (
        (SDPBackend.MATH, "math"),
        (SDPBackend.FLASH_ATTENTION, "flash"),
        (SDPBackend.EFFICIENT_ATTENTION, "efficient"),
        (SDPBackend.CUDNN_ATTENTION, "cudnn"),
    )
}


def sdpa_backend(query: torch.Tensor, key: torch.Tensor, mask: torch.Tensor | None, dropout: float) -> str:
    """The backend PyTorch's `scaled_dot_product_attention` picks for these inputs (flash, efficient, cudnn or
    math), from the choice function it dispatches with."""
    choice = torch._fused_sdp_choice(query, key, key, mask, dropout, False)
    return _SDPA_BACKENDS.get(choice, f"backend {choice}")
