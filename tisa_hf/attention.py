"""Scaled dot-product attention with a trainable additive bias that stays on PyTorch's fused CPU kernel.

On CPU, `torch.nn.functional.scaled_dot_product_attention` leaves its fused (flash) kernel for the unfused math
path as soon as the float mask requires a gradient, which TISA's bias does in training. PyTorch has no fused CPU
kernel that returns a mask gradient, so `TrainableBiasAttention` is written here: its forward is the fused kernel
with the bias as a constant mask, and its backward recomputes the probabilities from the saved log-sum-exp and
returns the gradients of the query, key, value and bias.

Long inputs at inference get a second route: the attention module receives the 2n-1 offset values
(`ToeplitzBias`) instead of the (H, n, n) bias, and attention runs in blocks of query rows, each with only its
rows of the bias, so no full-size bias is ever stored.

`install_fused_bias_sdpa` wraps transformers' "sdpa" attention function so that exactly these cases (CPU,
float32, mask requiring a gradient, no dropout, not causal; or a `ToeplitzBias` keyword) take those routes;
every other call goes to the original function unchanged. CUDA needs no bias-gradient route: its
memory-efficient kernel already returns the bias gradient.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from .kernels import toeplitz_from_offsets

_FUSED_DTYPES = (torch.float32,)
_UNSUPPORTED_KWARGS = ("position_bias", "cache", "softcap", "s_aux")
TOEPLITZ_BIAS_KWARG = "tisa_toeplitz_bias"
BLOCK_BIAS_BYTES = 64 * 2**20


def merge_bias(mask: torch.Tensor | None, bias: torch.Tensor) -> torch.Tensor:
    """An additive float mask holding `bias` where attention is allowed; broadcast over the batch if no mask."""
    if mask is None:
        return bias
    if mask.dtype == torch.bool:
        return torch.where(mask, bias, torch.finfo(bias.dtype).min)
    return (mask + bias).to(bias.dtype)


@dataclass(frozen=True)
class ToeplitzBias:
    """A layer's bias F[h, i, j] = values[h, j - i + n - 1], kept as its (heads, 2n-1) offset values."""

    values: torch.Tensor
    length: int

    def rows(self, start: int, stop: int) -> torch.Tensor:
        """Rows start .. stop-1 of the bias: (1, heads, stop - start, n)."""
        return toeplitz_from_offsets(self.values, self.length, start, stop).unsqueeze(0)


def blockwise_biased_sdpa(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    bias: ToeplitzBias,
    dropout: float,
    scale: float | None,
) -> torch.Tensor:
    """SDPA over blocks of query rows, each with its own rows of `bias` merged into `mask`: (B, H, n, d)."""
    batch, heads, length = query.shape[0], query.shape[1], query.shape[2]
    row_bytes = batch * heads * key.shape[2] * bias.values.element_size()
    block = max(1, min(length, BLOCK_BIAS_BYTES // row_bytes))
    outputs = []
    for start in range(0, length, block):
        stop = min(start + block, length)
        block_mask = mask[..., start:stop, :] if mask is not None and mask.shape[-2] > 1 else mask
        outputs.append(
            torch.nn.functional.scaled_dot_product_attention(
                query[:, :, start:stop],
                key,
                value,
                attn_mask=merge_bias(block_mask, bias.rows(start, stop)),
                dropout_p=dropout,
                scale=scale,
            )
        )
    return torch.cat(outputs, dim=2)


class TrainableBiasAttention(torch.autograd.Function):
    """softmax(q kᵀ · scale + bias) v through the fused CPU kernel, with a hand-written backward for the bias."""

    @staticmethod
    def forward(ctx, query, key, value, bias, scale):
        output, logsumexp = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            query, key, value, attn_mask=bias, scale=scale
        )
        ctx.save_for_backward(query, key, value, bias, output, logsumexp)
        ctx.scale = scale
        return output

    @staticmethod
    def backward(ctx, grad_output):
        query, key, value, bias, output, logsumexp = ctx.saved_tensors
        scale = ctx.scale
        probabilities = torch.matmul(query, key.transpose(-1, -2)).mul_(scale).add_(bias)
        probabilities = probabilities.sub_(logsumexp.unsqueeze(-1).to(probabilities.dtype)).exp_()
        grad_value = torch.matmul(probabilities.transpose(-1, -2), grad_output)
        row_dot = (grad_output * output).sum(-1, keepdim=True)
        grad_scores = torch.matmul(grad_output, value.transpose(-1, -2)).sub_(row_dot).mul_(probabilities)
        del probabilities
        grad_query = torch.matmul(grad_scores, key).mul_(scale)
        grad_key = torch.matmul(grad_scores.transpose(-1, -2), query).mul_(scale)
        grad_bias = grad_scores.sum_to_size(bias.shape) if ctx.needs_input_grad[3] else None
        return grad_query, grad_key, grad_value, grad_bias, None


def takes_fused_bias_path(
    query: torch.Tensor, key: torch.Tensor, mask: torch.Tensor | None, dropout: float, is_causal: bool | None
) -> bool:
    """Whether a call would leave PyTorch's fused CPU kernel only because its float mask requires a gradient."""
    return (
        mask is not None
        and mask.requires_grad
        and torch.is_grad_enabled()
        and query.device.type == "cpu"
        and query.dtype in _FUSED_DTYPES
        and mask.dtype == query.dtype
        and mask.dim() == 4
        and query.shape[1] == key.shape[1]
        and not dropout
        and not is_causal
    )


def fused_bias_sdpa_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' sdpa attention, with `TrainableBiasAttention` where the mask needs a gradient on CPU."""
    toeplitz_bias = kwargs.pop(TOEPLITZ_BIAS_KWARG, None)
    if toeplitz_bias is not None:
        output = blockwise_biased_sdpa(query, key, value, attention_mask, toeplitz_bias, dropout, scaling)
        return output.transpose(1, 2).contiguous(), None
    causal = is_causal if is_causal is not None else getattr(module, "is_causal", False)
    if takes_fused_bias_path(query, key, attention_mask, dropout, causal) and not any(
        kwargs.get(name) is not None for name in _UNSUPPORTED_KWARGS
    ):
        scale = scaling if scaling is not None else query.shape[-1] ** -0.5
        output = TrainableBiasAttention.apply(query, key, value, attention_mask, scale)
        return output.transpose(1, 2).contiguous(), None
    return sdpa_attention_forward(
        module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
    )


def fused_bias_sdpa_installed() -> bool:
    return AttentionInterface._global_mapping.get("sdpa") is fused_bias_sdpa_forward


def install_fused_bias_sdpa() -> None:
    """Registers `fused_bias_sdpa_forward` as transformers' "sdpa" attention (idempotent).

    Only replaces transformers' own function, never one a user registered.
    """
    current: Callable = AttentionInterface._global_mapping.get("sdpa")
    if current is sdpa_attention_forward:
        AttentionInterface.register("sdpa", fused_bias_sdpa_forward)
