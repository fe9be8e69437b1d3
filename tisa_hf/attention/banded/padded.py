"""The banded route with a padding mask (`corrected_banded_sdpa`): one plain attention call over all keys, corrected
within the band, or None where the correction would lose precision (the layer is then computed blockwise)."""

from __future__ import annotations

import math

import torch

from .log_sum_exp import attention_with_log_sum_exp

# Query blocks of `BANDED_CORRECTION_ROWS` rows; above `BANDED_DIRECT_BIAS_LIMIT` on max f the correction is computed
# rescaled (expm1(f) overflows float32 beyond 88); above `BANDED_MAX_CANCELLATION` on 1 / (1 + D) it would cancel that
# much of the plain attention's mass, and its rounding with it, and the layer is computed blockwise instead.
BANDED_CORRECTION_ROWS = 128
BANDED_DIRECT_BIAS_LIMIT = 40.0
BANDED_MAX_CANCELLATION = 16.0


def additive_mask(mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """The padding mask as `attention_with_log_sum_exp` takes it: additive, in the query's dtype (a boolean mask
    becomes 0 / -inf, as `scaled_dot_product_attention` converts it)."""
    if mask is None or mask.dtype == dtype:
        return mask
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(mask.logical_not(), -math.inf)
    return mask.to(dtype)


def toeplitz_window(table: torch.Tensor, first: int, rows: int, columns: int) -> torch.Tensor:
    """(heads, rows, columns) with f(first + c - r) at (r, c): the bias of `rows` query rows i0 .. i0 + rows - 1
    against the keys i0 + first .. i0 + first + columns - 1, the same for every i0 (offsets beyond ±(n-1) read 0)."""
    centre = (table.shape[-1] - 1) // 2
    padded = torch.nn.functional.pad(table, (rows, rows + columns))
    index = torch.arange(columns, device=table.device) - torch.arange(rows, device=table.device)[:, None]
    return padded[:, index + (first + centre + rows)]


def corrected_banded_sdpa(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor,
    table: torch.Tensor,
    band: tuple[int, int] | None,
    scale: float,
) -> torch.Tensor | None:
    """`banded_biased_sdpa` with a padding mask (boolean, or additive float): one attention call over all keys
    without the bias, corrected within the band; None where the correction would lose precision.

    With the plain call's output o_i and log-sum-exp l_i, and t_ij = s_ij - l_i (s the masked logits, so t <= 0),
    the biased output is (o_i + C_i) / (1 + D_i), where C_i = sum_j exp(t_ij) expm1(F_ij) v_j and D_i = sum_j
    exp(t_ij) expm1(F_ij) run over the band only (expm1(0) = 0 elsewhere, exactly): query blocks of
    `BANDED_CORRECTION_ROWS` rows against the keys their band reaches. Masked keys add exp(-inf) = 0. Where max F
    exceeds `BANDED_DIRECT_BIAS_LIMIT`, numerator and denominator are both scaled by exp(-M_i), M_i = max(0, max_j
    t_ij + F⁺_ij), and each term is computed as exp(t + F⁺ - M) · (expm1(F) / exp(F⁺)), so nothing overflows however
    large F is. Where F removes most of a row's plain attention mass, 1 + D_i is small and the subtraction loses the
    digits it cancels: beyond `BANDED_MAX_CANCELLATION` (1 / (1 + D_i), or its rescaled equivalent) None is
    returned."""
    length = query.shape[2]
    output, logsumexp = attention_with_log_sum_exp(
        query, key, value, attn_mask=additive_mask(mask, query.dtype), scale=scale
    )
    if band is None:
        return output
    low, high = band
    rows = min(length, BANDED_CORRECTION_ROWS)
    window = toeplitz_window(table, low, rows, rows + high - low)
    rescaled = bool(window.max() > BANDED_DIRECT_BIAS_LIMIT)
    if rescaled:
        positive = window.clamp(min=0)
        factor = torch.where(window >= 0, torch.expm1(-window).neg_(), torch.expm1(window))
    else:
        factor = torch.expm1(window)
    logsumexp = logsumexp.unsqueeze(-1)
    worst = torch.zeros((), dtype=output.dtype, device=output.device)
    for start in range(0, length, rows):
        stop = min(start + rows, length)
        first, last = max(0, start + low), min(length, stop + high)
        if first >= last:
            continue
        columns = slice(first - start - low, last - start - low)
        scores = torch.matmul(query[:, :, start:stop], key[:, :, first:last].transpose(-1, -2))
        scores.mul_(scale).sub_(logsumexp[:, :, start:stop])
        block_mask = mask[..., start:stop, first:last] if mask.shape[-2] > 1 else mask[..., first:last]
        if block_mask.dtype == torch.bool:
            scores.masked_fill_(block_mask.logical_not(), -math.inf)
        else:
            scores.add_(block_mask).masked_fill_(block_mask <= torch.finfo(block_mask.dtype).min / 2, -math.inf)
        if rescaled:
            scores.add_(positive[:, : stop - start, columns])
            shift = scores.amax(-1, keepdim=True).clamp_(min=0)
            scores.sub_(shift)
        scores.exp_().mul_(factor[:, : stop - start, columns])
        correction = torch.matmul(scores, value[:, :, first:last])
        denominator = scores.sum(-1, keepdim=True)
        block = output[:, :, start:stop]
        if rescaled:
            plain_share = shift.neg_().exp_()
            block.mul_(plain_share)
            denominator.add_(plain_share)
            cancellation = plain_share / denominator
        else:
            denominator.add_(1)
            cancellation = denominator.reciprocal()
        block.add_(correction).div_(denominator)
        worst = torch.maximum(worst, cancellation.max())
    if not worst <= BANDED_MAX_CANCELLATION:
        return None
    return output
