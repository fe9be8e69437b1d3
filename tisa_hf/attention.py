"""The one place where TISA's bias enters the attention logits: attention functions of TISA's own.

`tisa_eager`, `tisa_sdpa` and `tisa_flex_attention` are registered with transformers' `AttentionInterface` (and
the same names with `AttentionMaskInterface`, which builds their padding masks as for the plain backends) when
`tisa_hf` is imported. A TISA model's config selects them (`config._attn_implementation == "tisa_sdpa"`, say);
transformers' own entries are never replaced, so every other model computes exactly what it did before.

Each function reads its module's `AttentionSite` (set when the model was patched), takes that layer's bias from the
encoder's kernel module and hands the logits' bias to the plain backend:

- `tisa_eager`: the bias merged into the additive mask; `output_attentions=True` returns probabilities with it.
- `tisa_sdpa`: as `sdpa`, with three routes of its own. On CPU, PyTorch leaves its fused kernel for the unfused
  math path as soon as the float mask requires a gradient, which TISA's bias does in training, and PyTorch has no
  fused CPU kernel that returns a mask gradient: `TrainableBiasAttention` runs the fused kernel forward with the
  bias as a constant mask and recomputes the probabilities from the saved log-sum-exp in its backward. Long inputs
  without gradients (beyond the bias cache) never store the (H, n, n) bias: in float32 on the CPU or CUDA, a layer whose
  f(k) is exactly 0 outside a band of offsets at most a quarter of the length wide (fitted and adapted Gaussians
  underflow to 0 a few hundred tokens out; a far-field term never does) takes the banded route
  (`banded_biased_sdpa`, exact): without padding, each row's keys left of its band and right of it go to two
  causal fused calls with no bias (the second on reversed copies) and its band to one fused call over overlapping
  windows that share one mask table, merged by their log-sum-exps; a padded batch takes one plain fused call
  corrected within the band. Every other long-input call runs blockwise over query rows from the bias's 2n-1
  offset values (`ToeplitzBias`). CUDA needs no trainable-bias route: its memory-efficient kernel already returns
  the bias gradient, once it is told to keep its backward state where only the bias requires a gradient
  (`query_for_bias_only_backward`).
- `tisa_flex_attention`: flex attention whose score modification adds `table[h, j - i + n - 1]`, the layer's
  (H, 2n-1) offset values computed outside it: the (H, n, n) bias is never built, and the table's gradient flows
  back to the kernels. PyTorch has no flex attention backward on CPU, so training there is refused up front.

Which route a call takes is decided in one place, `sdpa_route` and `flex_refusal`, which the attention functions
and `tisa-hf env` (`tisa_hf.performance.environment_report`) both call.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import Enum
from types import EllipsisType
from typing import TYPE_CHECKING

import torch
from torch import nn
from torch.nn.attention import SDPBackend
from transformers import AttentionInterface
from transformers.integrations.flex_attention import compile_friendly_flex_attention, flex_attention_forward
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, eager_mask, flex_attention_mask, sdpa_mask

from .adapters import AttentionSite
from .errors import UsageError
from .kernels import TisaPositionBias, nonzero_band
from .names import SITE_ATTRIBUTE

if TYPE_CHECKING:
    from torch.nn.attention.flex_attention import BlockMask

# The blockwise route's query blocks: on the CPU, as many rows as keep a block's bias within BLOCK_BIAS_BYTES (it
# stays in cache). A GPU's fused kernel runs one program per head and tile of query rows, so blocks of a few dozen
# rows leave most of its multiprocessors idle (an H200 read 32,768 tokens 40 times slower than plain SDPA with them):
# there a block holds at least ACCELERATOR_BLOCK_ROWS rows (1.5 GiB of bias for 12 heads at 32,768 tokens).
BLOCK_BIAS_BYTES = 64 * 2**20
ACCELERATOR_BLOCK_ROWS = 1024
_FUSED_DTYPES = (torch.float32,)
_UNSUPPORTED_FUSED_KWARGS = ("position_bias", "cache", "softcap", "s_aux")
_SDPA_BACKENDS = {
    int(backend): name
    for backend, name in (
        (SDPBackend.MATH, "math"),
        (SDPBackend.FLASH_ATTENTION, "flash"),
        (SDPBackend.EFFICIENT_ATTENTION, "efficient"),
        (SDPBackend.CUDNN_ATTENTION, "cudnn"),
    )
}


def merge_bias(mask: torch.Tensor | None, bias: torch.Tensor) -> torch.Tensor:
    """An additive float mask holding `bias` where attention is allowed; broadcast over the batch if no mask."""
    if mask is None:
        return bias
    if mask.dtype == torch.bool:
        return torch.where(mask, bias, torch.finfo(bias.dtype).min)
    return (mask + bias).to(bias.dtype)


def _site(module: nn.Module) -> AttentionSite:
    site: AttentionSite | None = getattr(module, SITE_ATTRIBUTE, None)
    if site is None:
        raise ValueError(
            f"{type(module).__name__} runs a TISA attention function but was never patched with TISA. Load the "
            "model with tisa_hf (from_pretrained(..., tisa=...) or tisa_hf.patch) instead of setting "
            "config._attn_implementation by hand."
        )
    return site


def _site_bias(module: nn.Module, query: torch.Tensor, kwargs: dict) -> tuple[TisaPositionBias | None, int]:
    site = _site(module)
    layer = site.layer_index(kwargs)
    kernels = site.kernels()
    return (kernels if kernels is not None and kernels.enabled else None), layer


def length_scale_from(module: nn.Module) -> int | None:
    """The model's `TisaConfig.length_scale_from`."""
    return _site(module).encoder.config.tisa.length_scale_from


def length_scaled_query(module: nn.Module, query: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """The query, times log(n) / log(L) for each sequence of n > L unpadded tokens where the model's TISA settings
    ask for it (`TisaConfig.length_scale_from` = L), else the query itself.

    n is each sequence's count of keys it may attend to, read from the first query row of the padding mask (an
    encoder's mask is the same for every query row); without a mask every sequence has all its keys.
    """
    train_length = length_scale_from(module)
    if train_length is None or query.shape[2] <= train_length:
        return query
    if mask is None:
        lengths = torch.full((query.shape[0],), query.shape[2], device=query.device)
    elif mask.dtype == torch.bool:
        lengths = mask[:, 0, 0, :].sum(-1)
    else:
        lengths = (mask[:, 0, 0, :] > torch.finfo(mask.dtype).min / 2).sum(-1)
    scale = (lengths.to(torch.float32).log() / math.log(train_length)).clamp(min=1.0)
    return query * scale.to(query.dtype)[:, None, None, None]


def bias_dtype(query: torch.Tensor) -> torch.dtype:
    """The dtype of the attention logits: autocast's, where it is on, else the query's."""
    device_type = query.device.type
    if torch.is_autocast_enabled(device_type):
        return torch.get_autocast_dtype(device_type)
    return query.dtype


def tisa_eager_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Eager attention with the layer's TISA bias added to the logits."""
    kernels, layer = _site_bias(module, query, kwargs)
    query = length_scaled_query(module, query, attention_mask)
    if kernels is not None:
        attention_mask = merge_bias(attention_mask, kernels(layer, query.shape[2], bias_dtype(query)))
    # transformers has no shared eager function (each model file has its own copy); this is that same computation.
    scaling = scaling if scaling is not None else query.shape[-1] ** -0.5
    weights = torch.matmul(query, key.transpose(2, 3)) * scaling
    if attention_mask is not None:
        weights = weights + attention_mask
    weights = nn.functional.dropout(weights.softmax(-1), p=dropout, training=module.training)
    return torch.matmul(weights, value).transpose(1, 2).contiguous(), weights


def tisa_sdpa_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    dropout: float = 0.0,
    scaling: float | None = None,
    is_causal: bool | None = None,
    **kwargs,
) -> tuple[torch.Tensor, None]:
    """transformers' sdpa attention with the layer's TISA bias, through the CPU trainable-bias and blockwise routes."""
    kernels, layer = _site_bias(module, query, kwargs)
    query = length_scaled_query(module, query, attention_mask)
    route = sdpa_route(kernels, query, key, dropout, kwargs, layer)
    if route is SdpaRoute.PLAIN:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    length, dtype = query.shape[2], bias_dtype(query)
    if route is SdpaRoute.BANDED:
        values = kernels.offset_values(layer, length, dtype)
        output = torch.ops.tisa_hf.banded_sdpa(query, key, value, attention_mask, values, scaling)
        return output.transpose(1, 2).contiguous(), None
    if route is SdpaRoute.BLOCKWISE:
        bias = ToeplitzBias(kernels.offset_values(layer, length, dtype), length)
        output = blockwise_biased_sdpa(query, key, value, attention_mask, bias, dropout, scaling)
        return output.transpose(1, 2).contiguous(), None
    mask = merge_bias(attention_mask, kernels(layer, length, dtype))
    if route is SdpaRoute.TRAINABLE_BIAS:
        scale = scaling if scaling is not None else query.shape[-1] ** -0.5
        output = TrainableBiasAttention.apply(query, key, value, mask, scale)
        return output.transpose(1, 2).contiguous(), None
    query = query_for_bias_only_backward(query, key, value, mask)
    return sdpa_attention_forward(
        module, query, key, value, mask, dropout=dropout, scaling=scaling, is_causal=False, **kwargs
    )


def query_for_bias_only_backward(
    query: torch.Tensor, key: torch.Tensor, value: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """The query, made to require a gradient where only the bias does (kernels trained on a frozen encoder).

    PyTorch's fused SDPA kernels decide from the query, key and value alone whether to keep the log-sum-exp their
    backward needs; with only the mask requiring a gradient, CUDA's memory-efficient backward then fails with
    "LSE is not correctly aligned (strideH)". A detached query that requires a gradient makes them keep it: the
    values are unchanged and its gradient goes nowhere, since nothing before it requires one.
    """
    if mask.requires_grad and torch.is_grad_enabled() and not any(t.requires_grad for t in (query, key, value)):
        return query.detach().requires_grad_()
    return query


def tisa_flex_attention_forward(
    module: nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask,
    scaling: float | None = None,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """transformers' flex attention, with the layer's TISA bias read from its offset values by the score function."""
    kernels, layer = _site_bias(module, query, kwargs)
    refusal = flex_refusal(kernels, query, kwargs.get("dropout", 0.0))
    if refusal is not None:
        raise UsageError(refusal)
    train_length = length_scale_from(module)
    if attention_mask is not None and train_length is not None and query.shape[2] > train_length:
        raise UsageError(
            "TisaConfig.length_scale_from needs each sequence's length, which flex attention's block mask does not "
            "give: use attn_implementation='sdpa' or 'eager' for padded batches, or embed one text at a time."
        )
    query = length_scaled_query(module, query, None)
    if kernels is None:
        return flex_attention_forward(module, query, key, value, attention_mask, scaling=scaling, **kwargs)
    table = kernels.offset_values(layer, query.shape[2], bias_dtype(query))
    output = offset_table_flex_attention(
        query, key, value, attention_mask, table, scaling, module.training, kwargs.get("kernel_options")
    )
    return output.transpose(1, 2).contiguous(), None


def offset_table_flex_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: BlockMask | torch.Tensor | None,
    table: torch.Tensor,
    scale: float | None,
    training: bool,
    kernel_options: dict | None = None,
) -> torch.Tensor:
    """Flex attention adding table[h, j - i + n - 1] to the logit of query i and key j: (B, H, n, d).

    `table` (H, 2n-1) enters the score modification as a tensor it indexes, so flex attention's backward returns
    its gradient (the attention-gym "learnable bias" pattern) and autograd carries it on to the kernels. A padding
    mask comes as transformers builds it for flex attention: a `BlockMask`, or a float mask added as transformers'
    own flex function adds it. Compiled once per process by transformers' `compile_friendly_flex_attention`.
    """
    from torch.nn.attention.flex_attention import BlockMask  # here: flex attention needs torch >= 2.5

    block_mask = mask if isinstance(mask, BlockMask) else None
    score_mask = mask[:, :, :, : key.shape[-2]] if isinstance(mask, torch.Tensor) else None

    def score_mod(score, batch, head, query_index, key_index):
        if score_mask is not None:
            score = score + score_mask[batch][0][query_index][key_index]
        return score + table[head, key_index - query_index + (table.shape[-1] - 1) // 2]

    return compile_friendly_flex_attention(
        query,
        key,
        value,
        training=training,
        score_mod=score_mod,
        block_mask=block_mask,
        scale=scale,
        kernel_options=kernel_options,
    )


ATTENTION_FUNCTIONS: dict[str, tuple[Callable, Callable]] = {
    "tisa_eager": (tisa_eager_attention_forward, eager_mask),
    "tisa_sdpa": (tisa_sdpa_attention_forward, sdpa_mask),
    "tisa_flex_attention": (tisa_flex_attention_forward, flex_attention_mask),
}


def register_attention_functions() -> None:
    """Adds TISA's attention and mask functions under their own names (idempotent; replaces nothing)."""
    for name, (attention, mask) in ATTENTION_FUNCTIONS.items():
        AttentionInterface.register(name, attention)
        AttentionMaskInterface.register(name, mask)


@dataclass(frozen=True)
class ToeplitzBias:
    """A layer's bias F[h, i, j] = values[h, j - i + n - 1], kept as its (heads, 2n-1) offset values."""

    values: torch.Tensor
    length: int

    def row_blocks(self, block: int) -> Iterator[tuple[int, int, torch.Tensor]]:
        """(start, stop, rows start .. stop-1 of the bias as a (1, heads, stop - start, n) view) for consecutive
        blocks of `block` rows.

        The rows of block b are those of block 0 shifted b * block columns to the right, so every block is a
        column window of one contiguous band F'[p, m] = f(m - (blocks - 1) * block - p) of `block` rows, built
        once. Built per block instead, each block's rows were a fresh allocation whose copy (a flip of an
        overlapping view) came out column-major, which made the fused CPU kernel two to three times slower than
        with a row-major mask. Offsets below -(n-1) occur only in band entries no block reads (zero padding)."""
        length, blocks = self.length, -(-self.length // block)
        padding = blocks * block - length
        padded = torch.nn.functional.pad(self.values, (padding, 0))
        width = length + (blocks - 1) * block
        band = padded.unfold(-1, width, 1).flip(-2).contiguous().unsqueeze(0)
        for index, start in enumerate(range(0, length, block)):
            stop = min(start + block, length)
            shift = (blocks - 1 - index) * block
            yield start, stop, band[:, :, : stop - start, shift : shift + length]


def blockwise_rows(length: int, row_bytes: int, device: torch.device) -> int:
    """Query rows per block of the blockwise route, for rows of `row_bytes` bytes of bias on `device`."""
    rows = BLOCK_BIAS_BYTES // row_bytes
    if device.type != "cpu":
        rows = max(rows, ACCELERATOR_BLOCK_ROWS)
    return max(1, min(length, rows))


def blockwise_biased_sdpa(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    bias: ToeplitzBias,
    dropout: float,
    scale: float | None,
) -> torch.Tensor:
    """SDPA over blocks of query rows, each with its own rows of `bias` merged into `mask`: (B, H, n, d)."""
    batch, heads, length = query.shape[0], query.shape[1], query.shape[2]
    row_bytes = batch * heads * key.shape[2] * bias.values.element_size()
    outputs = []
    for start, stop, rows in bias.row_blocks(blockwise_rows(length, row_bytes, query.device)):
        block_mask = mask[..., start:stop, :] if mask is not None and mask.shape[-2] > 1 else mask
        block_bias = merge_bias(block_mask, rows)
        if block_bias.device.type != "cpu":
            # The CPU's fused kernel reads a block's window into the band in place. CUDA's memory-efficient kernel
            # reads masks in 16-byte vectors, which most windows do not start on ("misaligned address"), and failed
            # once on an aligned 1,024-row window at 16,384 tokens: it gets a fresh contiguous copy, as measured.
            block_bias = block_bias.contiguous()
        outputs.append(
            torch.nn.functional.scaled_dot_product_attention(
                query[:, :, start:stop],
                key,
                value,
                attn_mask=block_bias,
                dropout_p=dropout,
                scale=scale,
            )
        )
    return torch.cat(outputs, dim=2)


# The banded route (`banded_biased_sdpa`), taken where a layer's f(k) is exactly 0 outside a band of at most
# `BANDED_MAX_WIDTH_SHARE` of the input's length (wider bands: blockwise). Without a padding mask the band's keys are
# attended in query blocks of `BANDED_BLOCK_ROWS` rows (`BANDED_ACCELERATOR_BLOCK_ROWS` off the CPU), all interior
# blocks in one fused call, and the rows at either end in calls whose explicit mask holds at most
# `BANDED_EDGE_MASK_BYTES`. With a padding mask (the correction): query blocks of `BANDED_CORRECTION_ROWS` rows; above
# `BANDED_DIRECT_BIAS_LIMIT` on max f the correction is computed rescaled (expm1(f) overflows float32 beyond 88); above
# `BANDED_MAX_CANCELLATION` on 1 / (1 + D) it would cancel that much of the plain attention's mass, and its rounding
# with it, and the layer is computed blockwise instead.
BANDED_ROUTE_ENABLED = True  # False: such calls take the blockwise route (`tisa-hf bench --sections long` compares)
BANDED_MAX_WIDTH_SHARE = 0.25
BANDED_BLOCK_ROWS = 32
BANDED_ACCELERATOR_BLOCK_ROWS = 64
BANDED_EDGE_MASK_BYTES = 16 * 2**20
BANDED_CORRECTION_ROWS = 128
BANDED_DIRECT_BIAS_LIMIT = 40.0
BANDED_MAX_CANCELLATION = 16.0

_fused_cpu_attention = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu
_fused_cuda_attention = torch.ops.aten._scaled_dot_product_efficient_attention
# CUDA's memory-efficient kernel reads an additive mask in rows that start on 16 elements; PyTorch's own SDPA front
# end pads the mask's rows to that before calling it (`pad_bias`), which a direct call has to do itself.
CUDA_MASK_ALIGNMENT = 16


def fused_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attn_mask: torch.Tensor | None = None,
    is_causal: bool = False,
    scale: float | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(q kᵀ · scale + mask) v (B, H, m, d) and its log-sum-exp (B, H, m) in float32, from the fused kernel
    that returns both: PyTorch's flash kernel on the CPU, its memory-efficient kernel on CUDA (the one CUDA kernel
    that takes an additive mask in float32). `is_causal` is meant for square calls (the kernels align a causal mask
    of m < n keys differently)."""
    if query.device.type == "cpu":
        return _fused_cpu_attention(query, key, value, attn_mask=attn_mask, is_causal=is_causal, scale=scale)[:2]
    if attn_mask is not None:
        shape = (query.shape[0], query.shape[1], query.shape[2], key.shape[2])
        attn_mask = cuda_aligned_mask(attn_mask).expand(shape)
    output, logsumexp = _fused_cuda_attention(query, key, value, attn_mask, True, 0.0, is_causal, scale=scale)[:2]
    return output, logsumexp[..., : query.shape[2]]  # the kernel pads its log-sum-exp rows to a multiple of 32


def cuda_aligned_mask(mask: torch.Tensor) -> torch.Tensor:
    """`mask` itself where CUDA's memory-efficient kernel can read it in place (rows of contiguous values starting
    on `CUDA_MASK_ALIGNMENT` elements), else a copy whose rows are padded to that and sliced back (the size of
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

    Without a padding mask each row's keys are split into those left of its band, its band and those right of it,
    each attended by PyTorch's fused kernel (`fused_attention`), which also returns each part's log-sum-exp, and
    the three parts are merged by their log-sum-exps (`split_banded_sdpa`): every weight is positive, so nothing
    cancels, and the work is the plain model's n² plus the band's. With a padding mask, one plain fused call over
    all keys is corrected within the band (`corrected_banded_sdpa`)."""
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
        # A conversion or reduction that would change nothing is skipped: each is an operator call of its own.
        logsumexp = logsumexp.unsqueeze(-1)
        if logsumexp.dtype != probabilities.dtype:
            logsumexp = logsumexp.to(probabilities.dtype)
        probabilities = probabilities.sub_(logsumexp).exp_()
        grad_value = torch.matmul(probabilities.transpose(-1, -2), grad_output)
        row_dot = (grad_output * output).sum(-1, keepdim=True)
        grad_scores = torch.matmul(grad_output, value.transpose(-1, -2)).sub_(row_dot).mul_(probabilities)
        del probabilities
        grad_query = torch.matmul(grad_scores, key).mul_(scale)
        grad_key = torch.matmul(grad_scores.transpose(-1, -2), query).mul_(scale)
        grad_bias = None
        if ctx.needs_input_grad[3]:
            grad_bias = grad_scores if grad_scores.shape == bias.shape else grad_scores.sum_to_size(bias.shape)
        return grad_query, grad_key, grad_value, grad_bias, None


class SdpaRoute(Enum):
    """The routes of `tisa_sdpa`: transformers' sdpa where the layer has no kernels, fused CPU calls that attend a
    row's band with the bias and the keys beyond it without (`banded_biased_sdpa`), blockwise over query rows, the
    fused CPU kernel with `TrainableBiasAttention`'s backward, or SDPA with the stored bias (PyTorch then picks its
    backend: `sdpa_backend`)."""

    PLAIN = "sdpa"
    BANDED = "banded SDPA"
    BLOCKWISE = "blockwise SDPA"
    TRAINABLE_BIAS = "trainable-bias SDPA"
    STORED_BIAS = "SDPA + stored bias"


def sdpa_route(
    kernels: TisaPositionBias | None,
    query: torch.Tensor,
    key: torch.Tensor,
    dropout: float,
    kwargs: dict,
    layer: int | None = None,
) -> SdpaRoute:
    """The route `tisa_sdpa` takes for a call of `layer` with this query and key (its autocast and grad modes
    included); without a layer, the banded route (which depends on the layer's kernels) is not considered."""
    if kernels is None:
        return SdpaRoute.PLAIN
    dtype = bias_dtype(query)
    if not kernels.needs_grad() and not kernels.fits_cache(query.shape[2], dtype):
        if layer is not None and takes_banded_path(kernels, layer, query, key, dtype, dropout, kwargs):
            return SdpaRoute.BANDED
        return SdpaRoute.BLOCKWISE
    if takes_fused_bias_path(query, key, kernels.needs_grad(), dtype, dropout) and not any(
        kwargs.get(name) is not None for name in _UNSUPPORTED_FUSED_KWARGS
    ):
        return SdpaRoute.TRAINABLE_BIAS
    return SdpaRoute.STORED_BIAS


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
        BANDED_ROUTE_ENABLED
        and query.device.type in ("cpu", "cuda")
        and query.dtype in _FUSED_DTYPES
        and dtype == query.dtype
        and query.shape[1] == key.shape[1]
        and key.shape[2] == length
        and not dropout
        and kernels.far_field_slope is None
        and not torch.is_grad_enabled()
        and not any(kwargs.get(name) is not None for name in _UNSUPPORTED_FUSED_KWARGS)
    ):
        return False
    if torch.compiler.is_compiling():
        return True  # the band is read when the call runs (`banded_sdpa`)
    return band_fits(kernels.nonzero_band(layer, length, dtype), length)


def takes_fused_bias_path(
    query: torch.Tensor, key: torch.Tensor, bias_requires_grad: bool, dtype: torch.dtype, dropout: float
) -> bool:
    """Whether a call would leave PyTorch's fused CPU kernel only because its float bias (of `dtype`, merged with
    the 4-D padding mask) requires a gradient."""
    return (
        bias_requires_grad
        and torch.is_grad_enabled()
        and query.device.type == "cpu"
        and query.dtype in _FUSED_DTYPES
        and dtype == query.dtype
        and query.shape[1] == key.shape[1]
        and not dropout
    )


def sdpa_backend(query: torch.Tensor, key: torch.Tensor, mask: torch.Tensor | None, dropout: float) -> str:
    """The backend PyTorch's `scaled_dot_product_attention` picks for these inputs (flash, efficient, cudnn or
    math), from the choice function it dispatches with."""
    choice = torch._fused_sdp_choice(query, key, key, mask, dropout, False)
    return _SDPA_BACKENDS.get(choice, f"backend {choice}")


# PyTorch's CUDA flex attention kernel refuses smaller heads while compiling ("embedding dimension of the query,
# key, and value must be at least 16"), deep inside Inductor.
FLEX_CUDA_MIN_HEAD_DIM = 16


def flex_refusal(kernels: TisaPositionBias | None, query: torch.Tensor, dropout: float) -> str | None:
    """Why `tisa_flex_attention` cannot run a call, or None where it can."""
    trains_kernels = kernels is not None and kernels.needs_grad()
    return flex_refusal_for(query.device.type, query.shape[-1], dropout, trains_kernels)


def flex_refusal_for(device_type: str, head_dim: int, dropout: float, trains_kernels: bool) -> str | None:
    """`flex_refusal` from the call's description alone, so that a CPU can answer it about a CUDA call."""
    if dropout:
        return (
            f"flex attention has no attention dropout, and this model's is {dropout}: set the config's attention "
            "dropout to 0 (attention_probs_dropout_prob for BERT) or use attn_implementation='sdpa'."
        )
    if trains_kernels and device_type == "cpu":
        return (
            "flex attention cannot train TISA kernels on CPU: PyTorch has no flex attention backward there. Use "
            "attn_implementation='sdpa' to train on CPU (flex attention runs inference on CPU and trains on CUDA)."
        )
    if device_type == "cuda" and head_dim < FLEX_CUDA_MIN_HEAD_DIM:
        return (
            f"flex attention on CUDA needs heads of at least {FLEX_CUDA_MIN_HEAD_DIM} dimensions (PyTorch's flex "
            f"kernel does not compile smaller ones), and this model's have {head_dim}: use "
            "attn_implementation='sdpa'."
        )
    return None
