"""The fused TISA attention backward, FlashAttention-2's: the probabilities recomputed tile by tile from the saved
log-sum-exp (and the dropout mask redrawn from the same seed), with δ = rowsum(dO ∘ O) computed first; one Triton
kernel launched twice, a program a tile of keys for dK and dV, then a tile of query rows for dQ (no atomics for
either). The offset table's gradient is
each tile's dS summed along its diagonals inside the dK/dV kernel, then added into an fp32 (H, 2n-1) buffer with
atomics: 2 × (tile keys) atomics a tile, and no (B, H, n, n) tensor anywhere."""

from __future__ import annotations

import torch
import triton
import triton.language as tl

from .tiles import LOG2_E, backward_tiles, dropout_keep, launch_options, mask_and_seed, tile_logits


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
    probabilities = tl.exp2(logits - log_sum_exp[:, None] * LOG2_E)
    grad_probabilities = tl.dot(grad_out, tl.trans(v), input_precision=DOT_PRECISION)
    used = probabilities
    if HAS_DROPOUT:
        keep = dropout_keep(seed_ptr, head_index, rows, cols, length, dropout_p)
        used = tl.where(keep, probabilities / (1.0 - dropout_p), 0.0)
        grad_probabilities = tl.where(keep, grad_probabilities / (1.0 - dropout_p), 0.0)
    grad_logits = probabilities * (grad_probabilities - delta[:, None])
    return used, grad_logits


@triton.jit
def _backward_kernel(
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
    KEY_TILES: tl.constexpr,
):
    """One program a (batch, head) and a tile of keys (`KEY_TILES`: dK, dV and the table's gradient, over the query
    rows in tiles) or a tile of query rows (dQ, over the keys in tiles): one signature, launched once each."""
    head_index = tl.program_id(1)
    batch, head = head_index // heads, head_index % heads
    dims = tl.arange(0, BLOCK_D)
    dim_inside = dims < head_dim
    Q += batch * stride_qb + head * stride_qh
    K += batch * stride_kb + head * stride_kh
    V += batch * stride_vb + head * stride_vh
    GRAD_OUT += batch * stride_gb + head * stride_gh
    table_row = TABLE + head * stride_table
    mask_block = MASK + batch * stride_mb + head * stride_mh
    if KEY_TILES:
        col_start = tl.program_id(0) * BLOCK_N
        cols = col_start + tl.arange(0, BLOCK_N)
        col_inside = (cols < length)[:, None] & dim_inside[None, :]
        k = tl.load(K + cols[:, None] * stride_kn + dims[None, :], mask=col_inside, other=0.0)
        v = tl.load(V + cols[:, None] * stride_vn + dims[None, :], mask=col_inside, other=0.0)
        grad_k = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
        grad_v = tl.zeros([BLOCK_N, BLOCK_D], tl.float32)
        # The diagonal sums: in a tile, dS[r, c] lies on diagonal c - r, -(BLOCK_M - 1) .. BLOCK_N - 1. Row r rotated
        # left by r (a gather) puts diagonal t (t >= 0) and diagonal t - BLOCK_N in column t, apart by whether t + r
        # wrapped.
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
            in_table = (upper_index >= 0) & (upper_index < 2 * length - 1)
            tl.atomic_add(grad_table_row + upper_index, upper, mask=in_table)
            in_table = (lower_index >= 0) & (lower_index < 2 * length - 1)
            tl.atomic_add(grad_table_row + lower_index, lower, mask=in_table)
        out_offsets = head_index * length * head_dim + cols[:, None] * head_dim + dims[None, :]
        tl.store(GRAD_K + out_offsets, (grad_k * scale).to(GRAD_K.dtype.element_ty), mask=col_inside)
        tl.store(GRAD_V + out_offsets, grad_v.to(GRAD_V.dtype.element_ty), mask=col_inside)
    else:
        rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
        row_inside = (rows < length)[:, None] & dim_inside[None, :]
        q = tl.load(Q + rows[:, None] * stride_qn + dims[None, :], mask=row_inside, other=0.0)
        grad_out = tl.load(GRAD_OUT + rows[:, None] * stride_gn + dims[None, :], mask=row_inside, other=0.0)
        log_sum_exp = tl.load(LSE + head_index * length + rows, mask=rows < length, other=0.0)
        delta = tl.load(DELTA + head_index * length + rows, mask=rows < length, other=0.0)
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
    output: the arguments built once, the kernel launched over tiles of keys, then over tiles of query rows."""
    batch, heads, length, head_dim = query.shape
    block_m, block_n = backward_tiles(head_dim)
    grad_output = grad_output if grad_output.stride(-1) == 1 else grad_output.contiguous()
    delta = (grad_output.to(torch.float32) * output.to(torch.float32)).sum(-1).contiguous()
    grad_query, grad_key, grad_value = (torch.empty(query.shape, dtype=query.dtype, device=query.device) for _ in "qkv")
    grad_table = torch.zeros(table.shape, dtype=torch.float32, device=table.device)
    mask_arg, seed_arg = mask_and_seed(table, mask, seed)
    arguments = (
        *(query, key, value, grad_output, log_sum_exp, delta, table, mask_arg, seed_arg),
        *(grad_query, grad_key, grad_value, grad_table),
        *query.stride()[:3],
        *key.stride()[:3],
        *value.stride()[:3],
        *grad_output.stride()[:3],
        table.stride(0),
        *mask_arg.stride(),
        *(heads, length, head_dim, scale, dropout),
    )
    options = launch_options(query, mask, dropout, (block_m, block_n))
    _backward_kernel[(triton.cdiv(length, block_n), batch * heads)](*arguments, KEY_TILES=True, **options)
    _backward_kernel[(triton.cdiv(length, block_m), batch * heads)](*arguments, KEY_TILES=False, **options)
    return grad_query, grad_key, grad_value, grad_table.to(table.dtype)
