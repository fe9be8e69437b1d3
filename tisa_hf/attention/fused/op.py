"""The fused TISA attention kernels as PyTorch operators, `torch.ops.tisa_hf.toeplitz_attention` and its backward:
custom operators with fake (meta) implementations and a registered autograd, so that `torch.compile` keeps a model
with them in one graph (each call one opaque node, forward and backward) and `torch.export` sees one node a layer.

Registering the operators imports no Triton: the kernels' modules are imported when an operator first runs, on a
CUDA tensor or on a CPU tensor under Triton's interpreter (`TRITON_INTERPRET=1`, set before Triton is imported).
"""

from __future__ import annotations

import torch

from . import limits


def check_device(query: torch.Tensor) -> None:
    if query.device.type == "cpu" and not limits.TRITON_INTERPRETED:
        raise RuntimeError(
            "the fused TISA attention kernel runs on CUDA tensors, or on CPU tensors only under Triton's interpreter "
            "(TRITON_INTERPRET=1 set before Python starts): move the model to a GPU or use the stored-bias route."
        )


@torch.library.custom_op("tisa_hf::toeplitz_attention", mutates_args=())
def toeplitz_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    table: torch.Tensor,
    mask: torch.Tensor | None,
    seed: torch.Tensor | None,
    scale: float,
    dropout: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q kᵀ · scale + F) v, F[h, i, j] = table[h, j - i + n - 1], where the boolean `mask` (B, H, n, n, any
    strides; an expanded view costs nothing) is True (everywhere without it), with attention dropout `dropout` drawn
    from `seed` (a 1-element int64 tensor on the query's device): the output (B, H, n, d) and the log-sum-exp (B, H, n,
    fp32). A row that may attend to no key gives zeros, as PyTorch's SDPA does (its log-sum-exp is +inf).
    """
    check_device(query)
    from .forward import fused_forward

    return fused_forward(query, key, value, table, mask, seed, scale, dropout)


@toeplitz_attention.register_fake
def _(query, key, value, table, mask, seed, scale, dropout):
    batch, heads, length, head_dim = query.shape
    output = query.new_empty(batch, length, heads, head_dim).transpose(1, 2)
    return output, query.new_empty(batch, heads, length, dtype=torch.float32)


@torch.library.custom_op("tisa_hf::toeplitz_attention_backward", mutates_args=())
def toeplitz_attention_backward(
    grad_output: torch.Tensor,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    table: torch.Tensor,
    mask: torch.Tensor | None,
    seed: torch.Tensor | None,
    output: torch.Tensor,
    log_sum_exp: torch.Tensor,
    scale: float,
    dropout: float,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """dQ, dK, dV and d(table) of `toeplitz_attention`, its dropout redrawn from the same seed."""
    check_device(query)
    from .backward import fused_backward

    return fused_backward(grad_output, query, key, value, table, mask, seed, output, log_sum_exp, scale, dropout)


@toeplitz_attention_backward.register_fake
def _(grad_output, query, key, value, table, mask, seed, output, log_sum_exp, scale, dropout):
    return (
        torch.empty_like(query, memory_format=torch.contiguous_format),
        torch.empty_like(key, memory_format=torch.contiguous_format),
        torch.empty_like(value, memory_format=torch.contiguous_format),
        torch.empty_like(table, memory_format=torch.contiguous_format),
    )


def _setup_context(ctx, inputs, output):
    query, key, value, table, mask, seed, scale, dropout = inputs
    ctx.save_for_backward(query, key, value, table, mask, seed, *output)
    ctx.scale, ctx.dropout = scale, dropout
    ctx.mark_non_differentiable(output[1])  # the log-sum-exp is kept for the backward, not for a loss


def _backward(ctx, grad_output, grad_log_sum_exp):
    query, key, value, table, mask, seed, output, log_sum_exp = ctx.saved_tensors
    grads = torch.ops.tisa_hf.toeplitz_attention_backward(
        grad_output, query, key, value, table, mask, seed, output, log_sum_exp, ctx.scale, ctx.dropout
    )
    return *grads, None, None, None, None


toeplitz_attention.register_autograd(_backward, setup_context=_setup_context)
