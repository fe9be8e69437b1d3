"""What the fused TISA attention kernels' forward and backward share, written once so that both see the same logits
and the same dropout: one tile's logits (q kᵀ · scale + table[h, j - i + n - 1], with the padding), the dropout's
keep decision, and the tile sizes.

Triton, because no library has this kernel: FlashAttention has ALiBi but no trainable bias, FlexAttention's learnable
bias has no attention dropout and does not run on Turing, and PyTorch's memory-efficient kernel writes the bias
gradient as a (B, H, n, n) tensor (docs/performance.md). This module imports Triton: only the kernels' launchers
import it, when a kernel first runs.
"""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .limits import PIPELINED_FROM

# log2(e): the kernels take exponentials in base 2, exp2 being the GPU's native exponential.
LOG2_E = tl.constexpr(1.4426950408889634)


@triton.jit
def tile_logits(
    q,
    k,
    table_row,
    mask_block,
    stride_mm,
    stride_mn,
    rows,
    cols,
    length,
    scale,
    HAS_MASK: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """The (rows, cols) tile of the logits in base 2: (q kᵀ · scale + table[j - i + n - 1]) · log2(e), and -inf outside
    the keys a row may attend to (past the sequence, or False in the boolean mask, read at `mask_block` + row ·
    stride_mm + col · stride_mn: a padding mask expanded over the rows has stride_mm 0). Base 2, because exp2 is the
    GPU's native exponential.
    """
    valid = (rows[:, None] < length) & (cols[None, :] < length)
    if HAS_MASK:
        allowed = tl.load(mask_block + rows[:, None] * stride_mm + cols[None, :] * stride_mn, mask=valid, other=0)
        valid = valid & (allowed != 0)
    bias = tl.load(table_row + (cols[None, :] - rows[:, None] + length - 1), mask=valid, other=0.0)
    logits = tl.dot(q, tl.trans(k), input_precision=DOT_PRECISION) * scale + bias.to(tl.float32)
    return tl.where(valid, logits * LOG2_E, float("-inf"))


@triton.jit
def dropout_keep(seed_ptr, head_index, rows, cols, length, dropout_p):
    """Whether attention dropout keeps the probability of (row, col) in head `head_index` (batch × heads + head):
    Philox uniforms from the call's seed, the head in the key's high 32 bits and i · n + j as the counter, kept where
    u >= p (probability 1 - p, as SDPA's dropout)."""
    seed = tl.load(seed_ptr) + head_index.to(tl.int64) * 4294967296
    return tl.rand(seed, rows[:, None] * length + cols[None, :]) >= dropout_p


def head_block(head_dim: int) -> int:
    """The head dimension as the kernels hold it: the next power of two, at least 16 (tl.dot's smallest), masked."""
    return max(16, triton.next_power_of_2(head_dim))


def forward_tiles(head_dim: int) -> tuple[int, int]:
    """(query rows, keys) of a forward tile: 64 × 64 up to heads of 64, 64 × 32 above, which with one pipeline stage
    below compute capability 8.0 fits Turing's 64 KiB of shared memory in fp32 (untuned: no GPU measurement yet)."""
    return (64, 64) if head_block(head_dim) <= 64 else (64, 32)


def backward_tiles(head_dim: int) -> tuple[int, int]:
    """(query rows, keys) of a backward tile: the backward holds twice the forward's operands (q, dO, k, v and their
    gradients), so its tiles are halved; query rows never exceed keys (the diagonal sums assume it)."""
    return (32, 64) if head_block(head_dim) <= 64 else (32, 32)


def dot_precision(dtype: torch.dtype) -> str:
    """tl.dot's input precision: IEEE for fp32 (as PyTorch's fp32 attention, no TF32), the default for fp16/bf16."""
    return "ieee" if dtype in (torch.float32, torch.float64) else "tf32"


def pipeline_stages(device: torch.device) -> int:
    """Software pipelining stages: 2 from compute capability `PIPELINED_FROM`, else (and on CPU) 1."""
    if device.type != "cuda":
        return 1
    return 2 if torch.cuda.get_device_capability(device) >= PIPELINED_FROM else 1


def mask_and_seed(
    table: torch.Tensor, mask: torch.Tensor | None, seed: torch.Tensor | None
) -> tuple[torch.Tensor, torch.Tensor]:
    """The mask and seed a launch passes: the call's, or the table in place of one it has not (a kernel compiled
    without a mask or dropout never reads it, but takes a tensor)."""
    return (mask if mask is not None else table.view(1, 1, 1, -1)), (seed if seed is not None else table)


def launch_options(
    query: torch.Tensor, mask: torch.Tensor | None, dropout: float, tiles: tuple[int, int]
) -> dict[str, object]:
    """The compile-time options of a launch, forward or backward: what the kernel reads, its dot precision, its
    tiles (query rows, keys) and pipeline stages."""
    return {
        "HAS_MASK": mask is not None,
        "HAS_DROPOUT": dropout > 0,
        "DOT_PRECISION": dot_precision(query.dtype),
        "BLOCK_M": tiles[0],
        "BLOCK_N": tiles[1],
        "BLOCK_D": head_block(query.shape[-1]),
        "num_stages": pipeline_stages(query.device),
    }
