"""Flex attention with TISA's bias read from the layer's (H, 2n-1) offset table inside its score modification, and
the calls it cannot run, refused in one line."""

from __future__ import annotations

from typing import TYPE_CHECKING

import torch
from transformers.integrations.flex_attention import compile_friendly_flex_attention

from ..kernels import TisaPositionBias
from .logits import packed_positions

if TYPE_CHECKING:
    from torch.nn.attention.flex_attention import BlockMask


def offset_table_flex_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: BlockMask | torch.Tensor | None,
    table: torch.Tensor,
    scale: float | None,
    training: bool,
    kernel_options: dict | None = None,
) -> torch.Tensor:
    """Flex attention adding table[h, j - i + n - 1] to the logit of query i and key j: (B, H, n, d).

    `table` (H, 2n-1) enters the score modification as a tensor it indexes, so flex attention's backward returns
    its gradient (the attention-gym "learnable bias" pattern) and autograd carries it on to the kernels. A padding
    mask comes as transformers builds it for flex attention: a `BlockMask`, or a float mask added as transformers'
    own flex function adds it. Compiled once per process by transformers' `compile_friendly_flex_attention`.
    """
    from torch.nn.attention.flex_attention import BlockMask  # here: flex attention needs torch >= 2.5

    block_mask = mask if isinstance(mask, BlockMask) else None
    score_mask = mask[:, :, :, : key.shape[-2]] if isinstance(mask, torch.Tensor) else None

    def score_mod(score, batch, head, query_index, key_index):
        if score_mask is not None:
            score = score + score_mask[batch][0][query_index][key_index]
        return score + table[head, key_index - query_index + (table.shape[-1] - 1) // 2]

    return compile_friendly_flex_attention(
        query,
        key,
        value,
        training=training,
        score_mod=score_mod,
        block_mask=block_mask,
        scale=scale,
        kernel_options=kernel_options,
    )


# PyTorch's CUDA flex attention kernel refuses smaller heads while compiling ("embedding dimension of the query,
# key, and value must be at least 16"), deep inside Inductor.
FLEX_CUDA_MIN_HEAD_DIM = 16


def flex_refusal(
    kernels: TisaPositionBias | None,
    query: torch.Tensor,
    dropout: float,
    position_ids: torch.Tensor | None = None,
) -> str | None:
    """Why `tisa_flex_attention` cannot run a call, or None where it can."""
    if kernels is not None and packed_positions(position_ids) is not None:
        return (
            "tisa_flex_attention reads TISA's bias at the offsets of token places, and these position ids restart "
            "within a row (packed sequences): use attn_implementation='sdpa' or 'eager' for packed rows."
        )
    trains_kernels = kernels is not None and kernels.needs_grad()
    return flex_refusal_for(query.device.type, query.shape[-1], dropout, trains_kernels)


def flex_refusal_for(device_type: str, head_dim: int, dropout: float, trains_kernels: bool) -> str | None:
    """`flex_refusal` from the call's description alone, so that a CPU can answer it about a CUDA call."""
    if dropout:
        return (
            f"flex attention has no attention dropout, and this model's is {dropout}: set the config's attention "
            "dropout to 0 (attention_probs_dropout_prob for BERT) or use attn_implementation='sdpa'."
        )
    if trains_kernels and device_type == "cpu":
        return (
            "flex attention cannot train TISA kernels on CPU: PyTorch has no flex attention backward there. Use "
            "attn_implementation='sdpa' to train on CPU (flex attention runs inference on CPU and trains on CUDA)."
        )
    if device_type == "cuda" and head_dim < FLEX_CUDA_MIN_HEAD_DIM:
        return (
            f"flex attention on CUDA needs heads of at least {FLEX_CUDA_MIN_HEAD_DIM} dimensions (PyTorch's flex "
            f"kernel does not compile smaller ones), and this model's have {head_dim}: use "
            "attn_implementation='sdpa'."
        )
    return None
