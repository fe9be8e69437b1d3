"""PyTorch's SDPA kernels that return the log-sum-exp beside the output, called directly (the CPU's flash
attention kernel, CUDA's memory-efficient attention kernel), and the merge of two attentions over disjoint keys by
their log-sum-exps: the pieces the banded computation (`sdpa.py`, `padded.py`) is built of."""

from __future__ import annotations

import torch

_cpu_flash_attention = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
_cuda_memory_efficient_attention = torch.ops.aten._scaled_dot_product_efficient_attention
# CUDA's memory-efficient attention kernel reads an additive mask in rows that start on 16 elements; PyTorch's own SDPA
# front end pads the mask's rows to that before calling it (`pad_bias`), which a direct call has to do itself.
CUDA_MASK_ALIGNMENT = 16


def attention_with_log_sum_exp(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q kᵀ · scale + mask) v (B, H, m, d) and its log-sum-exp (B, H, m) in float32, from the attention
    kernel that returns both: PyTorch's flash attention kernel on the CPU, its memory-efficient attention kernel on CUDA
    (the one CUDA kernel that takes an additive mask in float32). `is_causal` is meant for square calls (the attention
    kernels align a causal mask of m < n keys differently)."""
    if query.device.type == "cpu":
        return _cpu_flash_attention(query, key, value, attn_mask=attn_mask, is_causal=is_causal, scale=scale)[:2]
    if attn_mask is not None:
        shape = (query.shape[0], query.shape[1], query.shape[2], key.shape[2])
        attn_mask = cuda_aligned_mask(attn_mask).expand(shape)
    output, logsumexp = _cuda_memory_efficient_attention(
        query, key, value, attn_mask, True, 0.0, is_causal, scale=scale
    )[:2]
    return output, logsumexp[..., : query.shape[2]]  # the kernel pads its log-sum-exp rows to a multiple of 32


def cuda_aligned_mask(mask: torch.Tensor) -> torch.Tensor:
    """`mask` itself where CUDA's memory-efficient attention kernel can read it in place (rows of contiguous values
    starting on `CUDA_MASK_ALIGNMENT` elements), else a copy whose rows are padded to that and sliced back (the size of
    `mask` itself: broadcast dimensions are expanded by the caller, without a copy)."""
    alignment = CUDA_MASK_ALIGNMENT
    row_strides = [stride for size, stride in zip(mask.shape[:-1], mask.stride()[:-1], strict=True) if size > 1]
    aligned = (
        mask.stride(-1) == 1
        and all(stride % alignment == 0 for stride in row_strides)
        and mask.data_ptr() % (alignment * mask.element_size()) == 0
    )
    if aligned:
        return mask
    columns = mask.shape[-1]
    padded = mask.new_empty(*mask.shape[:-1], -(-columns // alignment) * alignment)
    padded[..., :columns] = mask
    return padded[..., :columns]


def merge_attention(
    output: torch.Tensor,
    logsumexp: torch.Tensor,
    part: torch.Tensor,
    part_logsumexp: torch.Tensor,
    keep_logsumexp: bool,
) -> None:
    """Adds attention over further keys (`part`, `part_logsumexp`) to `output` and `logsumexp` in place: the
    weighted mean of the two outputs by their shares of the total exp-sum (with the total log-sum-exp written back
    where `keep_logsumexp`)."""
    share = (part_logsumexp - logsumexp).sigmoid_()
    output.lerp_(part, share.unsqueeze(-1))
    if keep_logsumexp:
        torch.logaddexp(logsumexp, part_logsumexp, out=logsumexp)
