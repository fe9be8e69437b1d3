"""The banded route (`banded_biased_sdpa`, exact): long inputs without gradients, in float32 on the CPU or CUDA, whose
layer's f(k) is exactly 0 outside a band of offsets at most a quarter of the length wide (fitted and adapted
Gaussians underflow to 0 a few hundred tokens out; a far-field term never does). Without padding, each row's keys
left of its band and right of it go to two causal fused calls with no bias (the second on reversed copies) and its
band to one fused call over overlapping windows that share one mask table, merged by their log-sum-exps; a padded
batch takes one plain fused call corrected within the band. The (H, n, n) bias is never built."""

from __future__ import annotations

import math
from types import EllipsisType

import torch

from ..kernels import TisaPositionBias, nonzero_band
from . import backends
from .blockwise import ToeplitzBias, blockwise_biased_sdpa
from .route import FUSED_DTYPES, UNSUPPORTED_FUSED_KWARGS, SdpaCall, SdpaRoute

# The banded route (`banded_biased_sdpa`), taken where a layer's f(k) is exactly 0 outside a band of at most
# `BANDED_MAX_WIDTH_SHARE` of the input's length (wider bands: blockwise). Without a padding mask the band's keys are
# attended in query blocks of `BANDED_BLOCK_ROWS` rows (`BANDED_ACCELERATOR_BLOCK_ROWS` off the CPU), all interior
# blocks in one fused call, and the rows at either end in calls whose explicit mask holds at most
# `BANDED_EDGE_MASK_BYTES`. With a padding mask (the correction): query blocks of `BANDED_CORRECTION_ROWS` rows; above
# `BANDED_DIRECT_BIAS_LIMIT` on max f the correction is computed rescaled (expm1(f) overflows float32 beyond 88); above
# `BANDED_MAX_CANCELLATION` on 1 / (1 + D) it would cancel that much of the plain attention's mass, and its rounding
# with it, and the layer is computed blockwise instead.
BANDED_MAX_WIDTH_SHARE = 0.25
BANDED_BLOCK_ROWS = 32
BANDED_ACCELERATOR_BLOCK_ROWS = 64
BANDED_EDGE_MASK_BYTES = 16 * 2**20
BANDED_CORRECTION_ROWS = 128
BANDED_DIRECT_BIAS_LIMIT = 40.0
BANDED_MAX_CANCELLATION = 16.0

_fused_cpu_attention = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
_fused_cuda_attention = torch.ops.aten._scaled_dot_product_efficient_attention
# CUDA's memory-efficient attention kernel reads an additive mask in rows that start on 16 elements; PyTorch's own SDPA
# front end pads the mask's rows to that before calling it (`pad_bias`), which a direct call has to do itself.
CUDA_MASK_ALIGNMENT = 16


class BandedRoute(SdpaRoute):
    name = "banded SDPA"

    def applies(self, call: SdpaCall) -> bool:
        return (
            call.layer is not None
            and not call.in_decoder
            and call.is_long_inference()
            and takes_banded_path(
                call.kernels, call.layer, call.query, call.key, call.bias_dtype, call.dropout, call.kwargs
            )
        )

    def run(self, call: SdpaCall) -> tuple[torch.Tensor, None]:
        values = call.kernels.offset_values(call.layer, call.length, call.bias_dtype)
        output = torch.ops.tisa_hf.banded_sdpa(call.query, call.key, call.value, call.mask, values, call.scaling)
        return output.transpose(1, 2).contiguous(), None

    def describe(self, call: SdpaCall) -> str:
        backend = backends.sdpa_backend(call.query, call.key, None, call.dropout)
        return (
            f"{self.name} ({backend}) for a layer whose f(k) is 0 outside a band of at most "
            f"{BANDED_MAX_WIDTH_SHARE:g}n offsets"
        )


def takes_banded_path(
    kernels: TisaPositionBias,
    layer: int,
    query: torch.Tensor,
    key: torch.Tensor,
    dtype: torch.dtype,
    dropout: float,
    kwargs: dict,
) -> bool:
    """Whether a long-input inference call can take `banded_biased_sdpa`: on the CPU or CUDA in float32 (the fused
    kernels that return the log-sum-exp), self-attention without dropout, grouped heads, gradients or an unsupported
    argument, without a far-field term (which is never 0), and with the layer's f(k) exactly 0 outside a band of
    offsets that, widened to hold 0, spans at most `BANDED_MAX_WIDTH_SHARE` of the length (read from the layer's
    own offset values at this length, `TisaPositionBias.nonzero_band`; inside a compiled graph `banded_sdpa` reads
    it when the call runs)."""
    length = query.shape[2]
    if not (
        query.device.type in ("cpu", "cuda")
        and query.dtype in FUSED_DTYPES
        and dtype == query.dtype
        and query.shape[1] == key.shape[1]
        and key.shape[2] == length
        and not dropout
        and kernels.far_field_slope is None
        and not torch.is_grad_enabled()
        and not any(kwargs.get(name) is not None for name in UNSUPPORTED_FUSED_KWARGS)
    ):
        return False
    if torch.compiler.is_compiling():
        return True  # the band is read when the call runs (`banded_sdpa`)
    return band_fits(kernels.nonzero_band(layer, length, dtype), length)


def fused_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q kᵀ · scale + mask) v (B, H, m, d) and its log-sum-exp (B, H, m) in float32, from the fused attention
    kernel that returns both: PyTorch's flash attention kernel on the CPU, its memory-efficient attention kernel on CUDA
    (the one CUDA kernel that takes an additive mask in float32). `is_causal` is meant for square calls (the attention
    kernels align a causal mask of m < n keys differently)."""
    if query.device.type == "cpu":
        return _fused_cpu_attention(query, key, value, attn_mask=attn_mask, is_causal=is_causal, scale=scale)[:2]
    if attn_mask is not None:
        shape = (query.shape[0], query.shape[1], query.shape[2], key.shape[2])
        attn_mask = cuda_aligned_mask(attn_mask).expand(shape)
    output, logsumexp = _fused_cuda_attention(query, key, value, attn_mask, True, 0.0, is_causal, scale=scale)[:2]
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


def banded_biased_sdpa(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    values: torch.Tensor,
    scale: float | None,
    band: tuple[int, int] | None | EllipsisType = ...,
) -> torch.Tensor | None:
    """softmax(q kᵀ · scale + mask + F) v for a bias F[h, i, j] = values[h, j - i + n - 1] that is exactly 0 outside
    a band of offsets, without ever building an (n, n) bias: (B, H, n, d), or None where the padded-batch
    computation would lose precision (the caller then takes the blockwise route). `band` is `nonzero_band(values)`,
    read from `values` where not given.

    Without a padding mask each row's keys are split into those left of its band, its band and those right of it, each
    attended by PyTorch's fused attention kernel (`fused_attention`), which also returns each part's log-sum-exp, and
    the three parts are merged by their log-sum-exps (`split_banded_sdpa`): every weight is positive, so nothing
    cancels, and the work is the plain model's n² plus the band's. With a padding mask, one plain fused call over all
    keys is corrected within the band (`corrected_banded_sdpa`)."""
    scale = scale if scale is not None else query.shape[-1] ** -0.5
    band = nonzero_band(values) if band is ... else band
    if mask is None:
        if band is None:
            return fused_attention(query, key, value, scale=scale)[0]
        return split_banded_sdpa(query, key, value, values, band, scale)
    return corrected_banded_sdpa(query, key, value, mask, values, band, scale)


@torch.library.custom_op("tisa_hf::banded_sdpa", mutates_args=())
def banded_sdpa(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    values: torch.Tensor,
    scale: float | None,
) -> torch.Tensor:
    """The banded route as one operator, (B, H, n, d): `banded_biased_sdpa` where the layer's band allows
    (`band_fits`), else blockwise (as where the padded-batch correction would lose precision).

    An operator, so that `torch.compile` keeps the route whole: it reads the band from the kernels' values at run
    time, which a compiled graph cannot branch on, and inside a compiled model it runs exactly as it does eagerly.
    Inference only (the route is taken without gradients), so it has no backward."""
    band = nonzero_band(values)
    if band_fits(band, query.shape[2]):
        output = banded_biased_sdpa(query, key, value, mask, values, scale, band)
        if output is not None:
            return output.contiguous()
    return blockwise_biased_sdpa(query, key, value, mask, ToeplitzBias(values, query.shape[2]), 0.0, scale)


@banded_sdpa.register_fake
def _(query, key, value, mask, values, scale):
    return query.new_empty(*query.shape[:-1], value.shape[-1])


def band_fits(band: tuple[int, int] | None, length: int) -> bool:
    """Whether a layer whose f is nonzero only at offsets `band` (None: nowhere) takes the banded route: the band,
    widened to hold 0, spans at most `BANDED_MAX_WIDTH_SHARE` of the length."""
    return band is None or max(band[1], 0) - min(band[0], 0) + 1 <= BANDED_MAX_WIDTH_SHARE * length


def split_banded_sdpa(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    values: torch.Tensor,
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
    output, logsumexp = band_attention(query, key, value, values, low, high, scale)
    start = 1 - low
    if start < length:
        keys = slice(0, length - start)
        part, part_logsumexp = fused_attention(
            query[:, :, start:], key[:, :, keys], value[:, :, keys], is_causal=True, scale=scale
        )
        merge_attention(output[:, :, start:], logsumexp[:, :, start:], part, part_logsumexp, keep_logsumexp=True)
        del part, part_logsumexp
    start = 1 + high
    if start < length:
        rows = length - start
        reversed_inputs = (query[:, :, :rows].flip(2), key[:, :, start:].flip(2), value[:, :, start:].flip(2))
        part, part_logsumexp = fused_attention(*reversed_inputs, is_causal=True, scale=scale)
        del reversed_inputs
        part, part_logsumexp = part.flip(2), part_logsumexp.flip(-1)
        merge_attention(output[:, :, :rows], logsumexp[:, :, :rows], part, part_logsumexp, keep_logsumexp=False)
    return output


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


def band_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    values: torch.Tensor,
    low: int,
    high: int,
    scale: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Each row i attending only keys i + low .. i + high (those in range), with the bias: the output (B, H, n, d)
    and log-sum-exp (B, H, n). low <= 0 <= high, so every row has a key.

    Interior query blocks of `BANDED_BLOCK_ROWS` rows (those whose keys b·R + low .. b·R + R - 1 + high are all in
    range) go to one fused call per sequence as a batch of blocks: the queries and the overlapping key and value
    windows are strided views of the inputs (no copy), and every block's mask is the same view of one table of the
    bias, -inf outside the band (the bias is Toeplitz). The rows at either end go to calls of their own, against the
    keys in range, with other views of that table as masks: one call per end where the table holds their rows
    within `BANDED_EDGE_MASK_BYTES`, more otherwise."""
    batch, heads, length, _ = query.shape
    rows = min(BANDED_BLOCK_ROWS if query.device.type == "cpu" else BANDED_ACCELERATOR_BLOCK_ROWS, length)
    first_block = -(low // rows)  # the first block whose keys start in range: ceil(-low / rows)
    stop_block = max(first_block, (length - high) // rows)  # after the last whose keys end in range
    start, stop = first_block * rows, stop_block * rows
    if start >= stop:
        start = stop = 0
    entries = BANDED_EDGE_MASK_BYTES // (heads * values.element_size())  # table rows * (rows + high - low)
    edge_rows = max(start, length - stop, 1)
    table_rows = max(rows, min(edge_rows, int((math.sqrt((high - low) ** 2 + 4 * entries) - (high - low)) / 2)))
    table = band_table(values, low, high, table_rows).unsqueeze(0)
    output = query.new_empty(batch, heads, length, value.shape[-1])
    logsumexp = query.new_empty(batch, heads, length, dtype=torch.float32)
    if stop > start:
        blocks = stop_block - first_block
        columns = rows + high - low
        block_mask = table[:, :, :rows, :columns]
        for sequence in range(batch):
            windows = (
                blocked(query[sequence], start, rows, rows, blocks),
                blocked(key[sequence], start + low, rows, columns, blocks),
                blocked(value[sequence], start + low, rows, columns, blocks),
            )
            part, part_logsumexp = fused_attention(*windows, attn_mask=block_mask, scale=scale)
            output[sequence, :, start:stop].view(heads, blocks, rows, -1).copy_(part.transpose(0, 1))
            logsumexp[sequence, :, start:stop].view(heads, blocks, rows).copy_(part_logsumexp.transpose(0, 1))
    for edge_start, edge_stop in ((0, start), (stop, length)):
        for block_start in range(edge_start, edge_stop, table_rows):
            block_stop = min(block_start + table_rows, edge_stop)
            first, last = max(0, block_start + low), min(length, block_stop + high)
            column = first - block_start - low
            part, part_logsumexp = fused_attention(
                query[:, :, block_start:block_stop],
                key[:, :, first:last],
                value[:, :, first:last],
                attn_mask=table[:, :, : block_stop - block_start, column : column + last - first],
                scale=scale,
            )
            output[:, :, block_start:block_stop] = part
            logsumexp[:, :, block_start:block_stop] = part_logsumexp
    return output, logsumexp


def band_table(values: torch.Tensor, low: int, high: int, rows: int) -> torch.Tensor:
    """(heads, rows, rows + high - low) with f(low + c - r) at (r, c) where that offset is in low .. high and -inf
    elsewhere: the bias, masked to the band, of `rows` query rows i0 .. i0 + rows - 1 against the keys i0 + low ..
    i0 + rows - 1 + high, the same for every i0 (the bias is Toeplitz)."""
    centre = (values.shape[-1] - 1) // 2
    width = high - low + 1
    band = values.new_full((values.shape[0], width + 2 * rows - 1), -math.inf)
    band[:, rows : rows + width] = values[:, centre + low : centre + high + 1]
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


def fused_mask(mask: torch.Tensor | None, dtype: torch.dtype) -> torch.Tensor | None:
    """The padding mask as `fused_attention` takes it: additive, in the query's dtype (a boolean mask
    becomes 0 / -inf, as `scaled_dot_product_attention` converts it)."""
    if mask is None or mask.dtype == dtype:
        return mask
    if mask.dtype == torch.bool:
        return torch.zeros(mask.shape, dtype=dtype, device=mask.device).masked_fill_(mask.logical_not(), -math.inf)
    return mask.to(dtype)


def toeplitz_window(values: torch.Tensor, first: int, rows: int, columns: int) -> torch.Tensor:
    """(heads, rows, columns) with f(first + c - r) at (r, c): the bias of `rows` query rows i0 .. i0 + rows - 1
    against the keys i0 + first .. i0 + first + columns - 1, the same for every i0 (offsets beyond ±(n-1) read 0)."""
    centre = (values.shape[-1] - 1) // 2
    padded = torch.nn.functional.pad(values, (rows, rows + columns))
    index = torch.arange(columns, device=values.device) - torch.arange(rows, device=values.device)[:, None]
    return padded[:, index + (first + centre + rows)]


def corrected_banded_sdpa(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor,
    values: torch.Tensor,
    band: tuple[int, int] | None,
    scale: float,
) -> torch.Tensor | None:
    """`banded_biased_sdpa` with a padding mask (boolean, or additive float): one fused call over all keys
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
    output, logsumexp = fused_attention(query, key, value, attn_mask=fused_mask(mask, query.dtype), scale=scale)
    if band is None:
        return output
    low, high = band
    rows = min(length, BANDED_CORRECTION_ROWS)
    table = toeplitz_window(values, low, rows, rows + high - low)
    rescaled = bool(table.max() > BANDED_DIRECT_BIAS_LIMIT)
    if rescaled:
        positive = table.clamp(min=0)
        factor = torch.where(table >= 0, torch.expm1(-table).neg_(), torch.expm1(table))
    else:
        factor = torch.expm1(table)
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
