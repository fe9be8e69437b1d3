"""The fused TISA attention forward, FlashAttention-2's: one program a tile of query rows and a (batch, head), over
the keys in tiles with the online softmax; each tile's bias read from the layer's (H, 2n-1) offset table, never
stored as (H, n, n); attention dropout drawn in the kernel; the log-sum-exp kept for the backward."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .tiles import LOG2_E, dropout_keep, forward_tiles, launch_options, mask_and_seed, tile_logits


@triton.jit
def _forward_kernel(
    Q,
    K,
    V,
    TABLE,
    MASK,
    SEED,
    OUT,
    LSE,
    stride_qb,
    stride_qh,
    stride_qn,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_ob,
    stride_oh,
    stride_on,
    stride_table,
    stride_mb,
    stride_mh,
    stride_mm,
    stride_mn,
    heads,
    length,
    head_dim,
    scale,
    dropout_p,
    HAS_MASK: tl.constexpr,
    HAS_DROPOUT: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    BLOCK_D: tl.constexpr,
):
    head_index = tl.program_id(1)
    batch, head = head_index // heads, head_index % heads
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    dims = tl.arange(0, BLOCK_D)
    row_inside = rows < length
    dim_inside = dims < head_dim
    q = tl.load(
        Q + batch * stride_qb + head * stride_qh + rows[:, None] * stride_qn + dims[None, :],
        mask=row_inside[:, None] & dim_inside[None, :],
        other=0.0,
    )
    K += batch * stride_kb + head * stride_kh
    V += batch * stride_vb + head * stride_vh
    table_row = TABLE + head * stride_table
    mask_block = MASK + batch * stride_mb + head * stride_mh
    running_max = tl.full([BLOCK_M], float("-inf"), tl.float32)
    running_sum = tl.zeros([BLOCK_M], tl.float32)
    accumulator = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    for start in range(0, length, BLOCK_N):
        cols = start + tl.arange(0, BLOCK_N)
        col_inside = (cols < length)[:, None] & dim_inside[None, :]
        k = tl.load(K + cols[:, None] * stride_kn + dims[None, :], mask=col_inside, other=0.0)
        v = tl.load(V + cols[:, None] * stride_vn + dims[None, :], mask=col_inside, other=0.0)
        logits = tile_logits(
            q, k, table_row, mask_block, stride_mm, stride_mn, rows, cols, length, scale, HAS_MASK, DOT_PRECISION
        )
        new_max = tl.maximum(running_max, tl.max(logits, 1))
        # A row with no key allowed yet keeps -inf as its maximum: subtract 0 instead (its exponentials are 0).
        shift = tl.where(new_max == float("-inf"), 0.0, new_max)
        probabilities = tl.exp2(logits - shift[:, None])
        rescale = tl.exp2(running_max - shift)
        running_sum = running_sum * rescale + tl.sum(probabilities, 1)
        if HAS_DROPOUT:
            keep = dropout_keep(SEED, head_index, rows, cols, length, dropout_p)
            probabilities = tl.where(keep, probabilities / (1.0 - dropout_p), 0.0)
        accumulator = accumulator * rescale[:, None] + tl.dot(
            probabilities.to(v.dtype), v, input_precision=DOT_PRECISION
        )
        running_max = new_max
    # A row no key may be attended from (a sequence of padding alone) gives zeros, as PyTorch's SDPA does, and +inf as
    # its log-sum-exp, so that the backward's probabilities of it are 0 (exp(-inf - inf)); every other row's sum is at
    # least 1, its maximum's exponential. Rows past the sequence are not stored.
    empty = running_sum == 0.0
    running_sum = tl.where(empty, 1.0, running_sum)
    output = accumulator / running_sum[:, None]
    tl.store(
        OUT + batch * stride_ob + head * stride_oh + rows[:, None] * stride_on + dims[None, :],
        output.to(OUT.dtype.element_ty),
        mask=row_inside[:, None] & dim_inside[None, :],
    )
    # The natural log-sum-exp of each row's logits (before dropout), as PyTorch's attention kernels return it.
    log_sum_exp = tl.where(empty, float("inf"), (running_max + tl.log2(running_sum)) / LOG2_E)
    tl.store(LSE + head_index * length + rows, log_sum_exp, mask=row_inside)


def fused_forward(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    table: torch.Tensor,
    mask: torch.Tensor | None,
    seed: torch.Tensor | None,
    scale: float,
    dropout: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q kᵀ · scale + F) v with F[h, i, j] = table[h, j - i + n - 1], where the boolean `mask` (B, H, n, n, any
    strides: broadcast dimensions stride 0) allows it, and attention dropout `dropout` from `seed`: the output (B, H, n,
    d), laid out as (B, n, H, d) so that the caller's transpose back is free, and the log-sum-exp (B, H, n) in fp32.
    """
    batch, heads, length, head_dim = query.shape
    output = query.new_empty(batch, length, heads, head_dim).transpose(1, 2)
    log_sum_exp = torch.empty(batch, heads, length, dtype=torch.float32, device=query.device)
    block_m, _ = tiles = forward_tiles(head_dim)
    mask_arg, seed_arg = mask_and_seed(table, mask, seed)
    _forward_kernel[(triton.cdiv(length, block_m), batch * heads)](
        *(query, key, value, table, mask_arg, seed_arg, output, log_sum_exp),
        *query.stride()[:3],
        *key.stride()[:3],
        *value.stride()[:3],
        *output.stride()[:3],
        table.stride(0),
        *mask_arg.stride(),
        *(heads, length, head_dim, scale, dropout),
        **launch_options(query, mask, dropout, tiles),
    )
    return output, log_sum_exp
