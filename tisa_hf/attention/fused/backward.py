"""The fused TISA attention backward, FlashAttention-2's: the probabilities recomputed tile by tile from the saved
log-sum-exp (and the dropout mask redrawn from the same seed), with δ = rowsum(dO ∘ O) computed first; one kernel a
tile of keys for dK and dV, one a tile of query rows for dQ (no atomics for either). The offset table's gradient is
each tile's dS summed along its diagonals inside the dK/dV kernel, then added into an fp32 (H, 2n-1) buffer with
atomics: 2 × (tile keys) atomics a tile, and no (B, H, n, n) tensor anywhere."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .tiles import backward_tiles, dot_precision, dropout_keep, head_block, pipeline_stages, tile_logits


@triton.jit
def _score_gradients(
    q,
    k,
    v,
    grad_out,
    log_sum_exp,
    delta,
    table_row,
    mask_block,
    stride_mm,
    stride_mn,
    seed_ptr,
    head_index,
    rows,
    cols,
    length,
    scale,
    dropout_p,
    HAS_MASK: tl.constexpr,
    HAS_DROPOUT: tl.constexpr,
    DOT_PRECISION: tl.constexpr,
):
    """One tile's probabilities as the output used them (dropped and rescaled) and the logits' gradient dS."""
    logits = tile_logits(
        q, k, table_row, mask_block, stride_mm, stride_mn, rows, cols, length, scale, HAS_MASK, DOT_PRECISION
    )
    probabilities = tl.exp2(logits - log_sum_exp[:, None] * 1.4426950408889634)
    grad_probabilities = tl.dot(grad_out, tl.trans(v), input_precision=DOT_PRECISION)
    used = probabilities
    if HAS_DROPOUT:
        keep = dropout_keep(seed_ptr, head_index, rows, cols, length, dropout_p)
        used = tl.where(keep, probabilities / (1.0 - dropout_p), 0.0)
        grad_probabilities = tl.where(keep, grad_probabilities / (1.0 - dropout_p), 0.0)
    grad_logits = probabilities * (grad_probabilities - delta[:, None])
    return used, grad_logits


@triton.jit
def _key_tile_kernel(
    Q,
    K,
    V,
    GRAD_OUT,
    LSE,
    DELTA,
    TABLE,
    MASK,
    SEED,
    GRAD_K,
    GRAD_V,
    GRAD_TABLE,
    stride_qb,
    stride_qh,
    stride_qn,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_gb,
    stride_gh,
    stride_gn,
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
    col_start = tl.program_id(0) * BLOCK_N
    cols = col_start + tl.arange(0, BLOCK_N)
    dims = tl.arange(0, BLOCK_D)
    dim_inside = dims < head_dim
    col_inside = (cols < length)[:, None] & dim_inside[None, :]
    k = tl.load(
        K + batch * stride_kb + head * stride_kh + cols[:, None] * stride_kn + dims[None, :], mask=col_inside, other=0.0
    )
    v = tl.load(
        V + batch * stride_vb + head * stride_vh + cols[:, None] * stride_vn + dims[None, :], mask=col_inside, other=0.0
    )
    Q += batch * stride_qb + head * stride_qh
    GRAD_OUT += batch * stride_gb + head * stride_gh
    table_row = TABLE + head * stride_table
    mask_block = MASK + batch * stride_mb + head * stride_mh
    grad_k = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    grad_v = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
    # The diagonal sums: in a tile, dS[r, c] lies on diagonal c - r, -(BLOCK_M - 1) .. BLOCK_N - 1. Row r rotated left
    # by r (a gather) puts diagonal t (t >= 0) and diagonal t - BLOCK_N in column t, apart by whether t + r wrapped.
    lanes = tl.arange(0, BLOCK_N)
    shifted = lanes[None, :] + tl.arange(0, BLOCK_M)[:, None]
    rotation = shifted % BLOCK_N
    wrapped = shifted >= BLOCK_N
    grad_table_row = GRAD_TABLE + head * (2 * length - 1)
    for row_start in range(0, length, BLOCK_M):
        rows = row_start + tl.arange(0, BLOCK_M)
        row_inside = (rows < length)[:, None] & dim_inside[None, :]
        q = tl.load(Q + rows[:, None] * stride_qn + dims[None, :], mask=row_inside, other=0.0)
        grad_out = tl.load(GRAD_OUT + rows[:, None] * stride_gn + dims[None, :], mask=row_inside, other=0.0)
        log_sum_exp = tl.load(LSE + head_index * length + rows, mask=rows < length, other=0.0)
        delta = tl.load(DELTA + head_index * length + rows, mask=rows < length, other=0.0)
        used, grad_logits = _score_gradients(
            q,
            k,
            v,
            grad_out,
            log_sum_exp,
            delta,
            table_row,
            mask_block,
            stride_mm,
            stride_mn,
            SEED,
            head_index,
            rows,
            cols,
            length,
            scale,
            dropout_p,
            HAS_MASK,
            HAS_DROPOUT,
            DOT_PRECISION,
        )
        grad_v += tl.dot(tl.trans(used.to(grad_out.dtype)), grad_out, input_precision=DOT_PRECISION)
        grad_k += tl.dot(tl.trans(grad_logits.to(q.dtype)), q, input_precision=DOT_PRECISION)
        rotated = tl.gather(grad_logits, rotation, axis=1)
        upper = tl.sum(tl.where(wrapped, 0.0, rotated), 0)
        lower = tl.sum(tl.where(wrapped, rotated, 0.0), 0)
        # Diagonal t of this tile is table offset col_start - row_start + t, at index ... + n - 1.
        upper_index = col_start - row_start + lanes + length - 1
        lower_index = upper_index - BLOCK_N
        tl.atomic_add(grad_table_row + upper_index, upper, mask=(upper_index >= 0) & (upper_index < 2 * length - 1))
        tl.atomic_add(grad_table_row + lower_index, lower, mask=(lower_index >= 0) & (lower_index < 2 * length - 1))
    out_offsets = head_index * length * head_dim + cols[:, None] * head_dim + dims[None, :]
    tl.store(GRAD_K + out_offsets, (grad_k * scale).to(GRAD_K.dtype.element_ty), mask=col_inside)
    tl.store(GRAD_V + out_offsets, grad_v.to(GRAD_V.dtype.element_ty), mask=col_inside)


@triton.jit
def _query_tile_kernel(
    Q,
    K,
    V,
    GRAD_OUT,
    LSE,
    DELTA,
    TABLE,
    MASK,
    SEED,
    GRAD_Q,
    stride_qb,
    stride_qh,
    stride_qn,
    stride_kb,
    stride_kh,
    stride_kn,
    stride_vb,
    stride_vh,
    stride_vn,
    stride_gb,
    stride_gh,
    stride_gn,
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
    dim_inside = dims < head_dim
    row_inside = (rows < length)[:, None] & dim_inside[None, :]
    q = tl.load(
        Q + batch * stride_qb + head * stride_qh + rows[:, None] * stride_qn + dims[None, :], mask=row_inside, other=0.0
    )
    grad_out = tl.load(
        GRAD_OUT + batch * stride_gb + head * stride_gh + rows[:, None] * stride_gn + dims[None, :],
        mask=row_inside,
        other=0.0,
    )
    log_sum_exp = tl.load(LSE + head_index * length + rows, mask=rows < length, other=0.0)
    delta = tl.load(DELTA + head_index * length + rows, mask=rows < length, other=0.0)
    K += batch * stride_kb + head * stride_kh
    V += batch * stride_vb + head * stride_vh
    table_row = TABLE + head * stride_table
    mask_block = MASK + batch * stride_mb + head * stride_mh
    grad_q = tl.zeros([BLOCK_M, BLOCK_D], tl.float32)
    for col_start in range(0, length, BLOCK_N):
        cols = col_start + tl.arange(0, BLOCK_N)
        col_inside = (cols < length)[:, None] & dim_inside[None, :]
        k = tl.load(K + cols[:, None] * stride_kn + dims[None, :], mask=col_inside, other=0.0)
        v = tl.load(V + cols[:, None] * stride_vn + dims[None, :], mask=col_inside, other=0.0)
        _, grad_logits = _score_gradients(
            q,
            k,
            v,
            grad_out,
            log_sum_exp,
            delta,
            table_row,
            mask_block,
            stride_mm,
            stride_mn,
            SEED,
            head_index,
            rows,
            cols,
            length,
            scale,
            dropout_p,
            HAS_MASK,
            HAS_DROPOUT,
            DOT_PRECISION,
        )
        grad_q += tl.dot(grad_logits.to(k.dtype), k, input_precision=DOT_PRECISION)
    out_offsets = head_index * length * head_dim + rows[:, None] * head_dim + dims[None, :]
    tl.store(GRAD_Q + out_offsets, (grad_q * scale).to(GRAD_Q.dtype.element_ty), mask=row_inside)


def fused_backward(
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
    """dQ, dK, dV (B, H, n, d, contiguous) and d(table) (H, 2n-1, in the table's dtype) of `fused_forward`'s
    output."""
    batch, heads, length, head_dim = query.shape
    block_m, block_n = backward_tiles(head_dim)
    grad_output = grad_output if grad_output.stride(-1) == 1 else grad_output.contiguous()
    delta = (grad_output.to(torch.float32) * output.to(torch.float32)).sum(-1).contiguous()
    grad_query, grad_key, grad_value = (torch.empty(query.shape, dtype=query.dtype, device=query.device) for _ in "qkv")
    grad_table = torch.zeros(table.shape, dtype=torch.float32, device=table.device)
    mask_arg = mask if mask is not None else table.view(1, 1, 1, -1)
    shared = (
        *query.stride()[:3],
        *key.stride()[:3],
        *value.stride()[:3],
        *grad_output.stride()[:3],
        table.stride(0),
        *mask_arg.stride(),
        heads,
        length,
        head_dim,
        scale,
        dropout,
    )
    options = {
        "HAS_MASK": mask is not None,
        "HAS_DROPOUT": dropout > 0,
        "DOT_PRECISION": dot_precision(query.dtype),
        "BLOCK_M": block_m,
        "BLOCK_N": block_n,
        "BLOCK_D": head_block(head_dim),
        "num_stages": pipeline_stages(query.device),
    }
    inputs = (query, key, value, grad_output, log_sum_exp, delta, table, mask_arg, seed if seed is not None else table)
    _key_tile_kernel[(triton.cdiv(length, block_n), batch * heads)](
        *inputs, grad_key, grad_value, grad_table, *shared, **options
    )
    _query_tile_kernel[(triton.cdiv(length, block_m), batch * heads)](*inputs, grad_query, *shared, **options)
    return grad_query, grad_key, grad_value, grad_table.to(table.dtype)
