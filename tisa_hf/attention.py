"""Scaled dot-product attention with a trainable additive bias that stays on PyTorch's fused CPU kernel.

On CPU, `torch.nn.functional.scaled_dot_product_attention` leaves its fused (flash) kernel for the unfused math
path as soon as the float mask requires a gradient, which TISA's bias does in training. PyTorch has no fused CPU
kernel that returns a mask gradient, so `TrainableBiasAttention` is written here: its forward is the fused kernel
with the bias as a constant mask, and its backward recomputes the probabilities from the saved log-sum-exp and
returns the gradients of the query, key, value and bias.

`install_fused_bias_sdpa` wraps transformers' "sdpa" attention function so that exactly this case (CPU, float32,
mask requiring a gradient, no dropout, not causal) takes that route; every other call goes to the original
function unchanged. CUDA needs none of this: its memory-efficient kernel already returns the bias gradient.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from transformers import AttentionInterface
from transformers.integrations.sdpa_attention import sdpa_attention_forward

_FUSED_DTYPES = (torch.float32,)
_UNSUPPORTED_KWARGS = ("position_bias", "cache", "softcap", "s_aux")


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


def install_fused_bias_sdpa() -> None:
    """Registers `fused_bias_sdpa_forward` as transformers' "sdpa" attention (idempotent).

    Only replaces transformers' own function, never one a user registered.
    """
    current: Callable = AttentionInterface._global_mapping.get("sdpa")
    if current is sdpa_attention_forward:
        AttentionInterface.register("sdpa", fused_bias_sdpa_forward)
