"""The banded computation (`banded_biased_sdpa`, exact) for long inputs without gradients whose layer's f(k) is exactly
0 outside a band of offsets: without padding, each row's keys left of its band and right of it go to two causal
attention calls with no bias (the second on reversed copies) and its band to one attention call over overlapping
windows that share one mask window, merged by their log-sum-exps; a padded batch takes one plain attention call
corrected within the band (`padded.py`). The (H, n, n) bias is never built. The attention calls and their merge are
`log_sum_exp.py`'s."""

from __future__ import annotations

import math
from types import EllipsisType

import torch

from ...kernels import nonzero_band
from .log_sum_exp import attention_with_log_sum_exp, merge_attention
from .padded import corrected_banded_sdpa

# The banded route (`banded_biased_sdpa`), taken where a layer's f(k) is exactly 0 outside a band of at most
# `BANDED_MAX_WIDTH_SHARE` of the input's length (wider bands: blockwise). Without a padding mask the band's keys are
# attended in query blocks of `BANDED_BLOCK_ROWS` rows (`BANDED_ACCELERATOR_BLOCK_ROWS` off the CPU), all interior
# blocks in one attention call, and the rows at either end in calls whose explicit mask holds at most
# `BANDED_EDGE_MASK_BYTES` (with a padding mask: `padded.py`).
BANDED_MAX_WIDTH_SHARE = 0.25
BANDED_BLOCK_ROWS = 32
BANDED_ACCELERATOR_BLOCK_ROWS = 64
BANDED_EDGE_MASK_BYTES = 16 * 2**20


def banded_biased_sdpa(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    table: torch.Tensor,
    scale: float | None,
    band: tuple[int, int] | None | EllipsisType = ...,
) -> torch.Tensor | None:
    """softmax(q kᵀ · scale + mask + F) v for a bias F[h, i, j] = table[h, j - i + n - 1] that is exactly 0 outside
    a band of offsets, without ever building an (n, n) bias: (B, H, n, d), or None where the padded-batch
    computation would lose precision (the caller then takes the blockwise route). `band` is `nonzero_band(table)`,
    read from `table` where not given.

    Without a padding mask each row's keys are split into those left of its band, its band and those right of it, each
    attended by PyTorch's CPU flash or CUDA memory-efficient kernel (`attention_with_log_sum_exp`), which also returns
    each part's log-sum-exp, and the three parts are merged by their log-sum-exps (`split_banded_sdpa`): every weight is
    positive, so nothing cancels, and the work is the plain model's n² plus the band's. With a padding mask, one plain
    attention call over all keys is corrected within the band (`corrected_banded_sdpa`)."""
    scale = scale if scale is not None else query.shape[-1] ** -0.5
    band = nonzero_band(table) if band is ... else band
    if mask is None:
        if band is None:
            return attention_with_log_sum_exp(query, key, value, scale=scale)[0]
        return split_banded_sdpa(query, key, value, table, band, scale)
    return corrected_banded_sdpa(query, key, value, mask, table, band, scale)


def band_fits(band: tuple[int, int] | None, length: int) -> bool:
    """Whether a layer whose f is nonzero only at offsets `band` (None: nowhere) takes the banded route: the band,
    widened to hold 0, spans at most `BANDED_MAX_WIDTH_SHARE` of the length."""
    return band is None or max(band[1], 0) - min(band[0], 0) + 1 <= BANDED_MAX_WIDTH_SHARE * length


def split_banded_sdpa(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    table: torch.Tensor,
    band: tuple[int, int],
    scale: float,
) -> torch.Tensor:
    """`banded_biased_sdpa` without a padding mask, for f nonzero only at offsets band[0] .. band[1].

    With the band widened to hold offset 0 (lo <= 0 <= hi), row i attends keys j < i + lo with f = 0 (one causal
    call on the rows from 1 - lo against the keys up to n - 1 + lo), keys i + lo <= j <= i + hi with the bias
    (`band_attention`), and keys j > i + hi with f = 0 (one causal call on reversed copies of the rows up to
    n - 1 - hi and the keys from hi + 1). Each part returns its output and log-sum-exp, and the parts are merged:
    out = lerp(out_a, out_b, sigmoid(lse_b - lse_a)), lse = logaddexp(lse_a, lse_b)."""
    length = query.shape[2]
    low, high = min(band[0], 0), max(band[1], 0)
    output, logsumexp = band_attention(query, key, value, table, low, high, scale)
    start = 1 - low
    if start < length:
        keys = slice(0, length - start)
        part, part_logsumexp = attention_with_log_sum_exp(
            query[:, :, start:], key[:, :, keys], value[:, :, keys], is_causal=True, scale=scale
        )
        merge_attention(output[:, :, start:], logsumexp[:, :, start:], part, part_logsumexp, keep_logsumexp=True)
        del part, part_logsumexp
    start = 1 + high
    if start < length:
        rows = length - start
        reversed_inputs = (query[:, :, :rows].flip(2), key[:, :, start:].flip(2), value[:, :, start:].flip(2))
        part, part_logsumexp = attention_with_log_sum_exp(*reversed_inputs, is_causal=True, scale=scale)
        del reversed_inputs
        part, part_logsumexp = part.flip(2), part_logsumexp.flip(-1)
        merge_attention(output[:, :, :rows], logsumexp[:, :, :rows], part, part_logsumexp, keep_logsumexp=False)
    return output


def band_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    table: torch.Tensor,
    low: int,
    high: int,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row i attending only keys i + low .. i + high (those in range), with the bias: the output (B, H, n, d)
    and log-sum-exp (B, H, n). low <= 0 <= high, so every row has a key.

    Interior query blocks of `BANDED_BLOCK_ROWS` rows (those whose keys b·R + low .. b·R + R - 1 + high are all in
    range) go to one attention call per sequence as a batch of blocks: the queries and the overlapping key and value
    windows are strided views of the inputs (no copy), and every block's mask is the same view of one window of
    the bias, -inf outside the band (the bias is Toeplitz). The rows at either end go to calls of their own, against the
    keys in range, with other views of that window as masks: one call per end where the window holds their rows
    within `BANDED_EDGE_MASK_BYTES`, more otherwise."""
    batch, heads, length, _ = query.shape
    rows = min(BANDED_BLOCK_ROWS if query.device.type == "cpu" else BANDED_ACCELERATOR_BLOCK_ROWS, length)
    first_block = -(low // rows)  # the first block whose keys start in range: ceil(-low / rows)
    stop_block = max(first_block, (length - high) // rows)  # after the last whose keys end in range
    start, stop = first_block * rows, stop_block * rows
    if start >= stop:
        start = stop = 0
    entries = BANDED_EDGE_MASK_BYTES // (heads * table.element_size())  # window rows * (rows + high - low)
    edge_rows = max(start, length - stop, 1)
    window_rows = max(rows, min(edge_rows, int((math.sqrt((high - low) ** 2 + 4 * entries) - (high - low)) / 2)))
    window = band_window(table, low, high, window_rows).unsqueeze(0)
    output = query.new_empty(batch, heads, length, value.shape[-1])
    logsumexp = query.new_empty(batch, heads, length, dtype=torch.float32)
    if stop > start:
        blocks = stop_block - first_block
        columns = rows + high - low
        block_mask = window[:, :, :rows, :columns]
        for sequence in range(batch):
            windows = (
                blocked(query[sequence], start, rows, rows, blocks),
                blocked(key[sequence], start + low, rows, columns, blocks),
                blocked(value[sequence], start + low, rows, columns, blocks),
            )
            part, part_logsumexp = attention_with_log_sum_exp(*windows, attn_mask=block_mask, scale=scale)
            output[sequence, :, start:stop].view(heads, blocks, rows, -1).copy_(part.transpose(0, 1))
            logsumexp[sequence, :, start:stop].view(heads, blocks, rows).copy_(part_logsumexp.transpose(0, 1))
    for edge_start, edge_stop in ((0, start), (stop, length)):
        for block_start in range(edge_start, edge_stop, window_rows):
            block_stop = min(block_start + window_rows, edge_stop)
            first, last = max(0, block_start + low), min(length, block_stop + high)
            column = first - block_start - low
            part, part_logsumexp = attention_with_log_sum_exp(
                query[:, :, block_start:block_stop],
                key[:, :, first:last],
                value[:, :, first:last],
                attn_mask=window[:, :, : block_stop - block_start, column : column + last - first],
                scale=scale,
            )
            output[:, :, block_start:block_stop] = part
            logsumexp[:, :, block_start:block_stop] = part_logsumexp
    return output, logsumexp


def band_window(table: torch.Tensor, low: int, high: int, rows: int) -> torch.Tensor:
    """(heads, rows, rows + high - low) with f(low + c - r) at (r, c) where that offset is in low .. high and -inf
    elsewhere: the bias, masked to the band, of `rows` query rows i0 .. i0 + rows - 1 against the keys i0 + low ..
    i0 + rows - 1 + high, the same for every i0 (the bias is Toeplitz)."""
    centre = (table.shape[-1] - 1) // 2
    width = high - low + 1
    band = table.new_full((table.shape[0], width + 2 * rows - 1), -math.inf)
    band[:, rows : rows + width] = table[:, centre + low : centre + high + 1]
    # Window s of `unfold` holds band[s .. s + columns - 1], offsets low - rows + s + c: row r is window rows - r.
    return band.unfold(-1, rows + width - 1, 1)[:, 1:].flip(-2)


def blocked(tensor: torch.Tensor, start: int, step: int, size: int, blocks: int) -> torch.Tensor:
    """`blocks` windows of `size` rows of one sequence's (heads, n, d) tensor, the b-th starting at row
    start + b·step: a (blocks, heads, size, d) strided view (overlapping where size > step)."""
    head_stride, row_stride, column_stride = tensor.stride()
    return tensor.as_strided(
        (blocks, tensor.shape[0], size, tensor.shape[2]),
        (step * row_stride, head_stride, row_stride, column_stride),
        tensor.storage_offset() + start * row_stride,
    )
