"""The one place where TISA's bias enters the attention logits: attention functions of TISA's own.

`tisa_eager`, `tisa_sdpa` and `tisa_flex_attention` are registered with transformers' `AttentionInterface` (and
the same names with `AttentionMaskInterface`, which builds their padding masks as for the plain backends) when
`tisa_hf` is imported. A TISA model's config selects them (`config._attn_implementation == "tisa_sdpa"`, say);
transformers' own entries are never replaced, so every other model computes exactly what it did before.

Each function reads its module's `AttentionSite` (set when the model was patched), takes that layer's bias from the
encoder's kernel module and hands the logits' bias to the plain backend:

- `tisa_eager`: the bias merged into the additive mask; `output_attentions=True` returns probabilities with it.
- `tisa_sdpa`: as `sdpa`, with two routes of its own. On CPU, PyTorch leaves its fused kernel for the unfused math
  path as soon as the float mask requires a gradient, which TISA's bias does in training, and PyTorch has no fused
  CPU kernel that returns a mask gradient: `TrainableBiasAttention` runs the fused kernel forward with the bias as
  a constant mask and recomputes the probabilities from the saved log-sum-exp in its backward. Long inputs without
  gradients run blockwise over query rows from the bias's 2n-1 offset values (`ToeplitzBias`), never storing the
  (H, n, n) bias. CUDA needs neither: its memory-efficient kernel already returns the bias gradient, once it is
  told to keep its backward state where only the bias requires a gradient (`query_for_bias_only_backward`).
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
from .kernels import TisaPositionBias
from .names import SITE_ATTRIBUTE

if TYPE_CHECKING:
    from torch.nn.attention.flex_attention import BlockMask

BLOCK_BIAS_BYTES = 64 * 2**20
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
    route = sdpa_route(kernels, query, key, dropout, kwargs)
    if route is SdpaRoute.PLAIN:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    length, dtype = query.shape[2], bias_dtype(query)
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


# CUDA's memory-efficient attention reads its mask in 16-byte vectors: the mask must start at such an address and
# each of its rows too ("CUDA error: misaligned address" otherwise).
MASK_ALIGNMENT_BYTES = 16


def aligned_mask(mask: torch.Tensor) -> torch.Tensor:
    """`mask`, or a fresh copy of it where its start or a row stride is not aligned to MASK_ALIGNMENT_BYTES.

    A block's rows are a window `shift` elements into the band (`ToeplitzBias.row_blocks`), which the fused CPU
    kernel reads in place; on CUDA such a window is misaligned, and a fresh allocation is not. (PyTorch pads a
    contiguous mask whose row length is not a multiple of the alignment itself.)"""
    if mask.is_contiguous():
        return mask if mask.data_ptr() % MASK_ALIGNMENT_BYTES == 0 else mask.clone()
    size = mask.element_size()
    strides = [stride * size for dimension, stride in enumerate(mask.stride()[:-1]) if mask.shape[dimension] > 1]
    aligned = mask.data_ptr() % MASK_ALIGNMENT_BYTES == 0 and all(s % MASK_ALIGNMENT_BYTES == 0 for s in strides)
    return mask if aligned else mask.contiguous()


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
    block = max(1, min(length, BLOCK_BIAS_BYTES // row_bytes))
    outputs = []
    for start, stop, rows in bias.row_blocks(block):
        block_mask = mask[..., start:stop, :] if mask is not None and mask.shape[-2] > 1 else mask
        block_bias = merge_bias(block_mask, rows)
        if block_bias.device.type != "cpu":
            block_bias = aligned_mask(block_bias)
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
    """The routes of `tisa_sdpa`: transformers' sdpa where the layer has no kernels, blockwise over query rows,
    the fused CPU kernel with `TrainableBiasAttention`'s backward, or SDPA with the stored bias (PyTorch then picks
    its backend: `sdpa_backend`)."""

    PLAIN = "sdpa"
    BLOCKWISE = "blockwise SDPA"
    TRAINABLE_BIAS = "trainable-bias SDPA"
    STORED_BIAS = "SDPA + stored bias"


def sdpa_route(
    kernels: TisaPositionBias | None, query: torch.Tensor, key: torch.Tensor, dropout: float, kwargs: dict
) -> SdpaRoute:
    """The route `tisa_sdpa` takes for a call with this query and key (its autocast and grad modes included)."""
    if kernels is None:
        return SdpaRoute.PLAIN
    dtype = bias_dtype(query)
    if not kernels.needs_grad() and not kernels.fits_cache(query.shape[2], dtype):
        return SdpaRoute.BLOCKWISE
    if takes_fused_bias_path(query, key, kernels.needs_grad(), dtype, dropout) and not any(
        kwargs.get(name) is not None for name in _UNSUPPORTED_FUSED_KWARGS
    ):
        return SdpaRoute.TRAINABLE_BIAS
    return SdpaRoute.STORED_BIAS


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
