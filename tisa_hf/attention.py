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
- `tisa_flex_attention`: the bias as flex attention's `position_bias` score modification.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import torch
from torch import nn
from transformers import AttentionInterface
from transformers.integrations.flex_attention import flex_attention_forward
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, eager_mask, flex_attention_mask, sdpa_mask

from .adapters import AttentionSite
from .kernels import TisaPositionBias, toeplitz_from_offsets
from .names import SITE_ATTRIBUTE

BLOCK_BIAS_BYTES = 64 * 2**20
_FUSED_DTYPES = (torch.float32,)
_UNSUPPORTED_FUSED_KWARGS = ("position_bias", "cache", "softcap", "s_aux")


def merge_bias(mask: torch.Tensor | None, bias: torch.Tensor) -> torch.Tensor:
    """An additive float mask holding `bias` where attention is allowed; broadcast over the batch if no mask."""
    if mask is None:
        return bias
    if mask.dtype == torch.bool:
        return torch.where(mask, bias, torch.finfo(bias.dtype).min)
    return (mask + bias).to(bias.dtype)


def _site_bias(module: nn.Module, query: torch.Tensor, kwargs: dict) -> tuple[TisaPositionBias | None, int]:
    site: AttentionSite | None = getattr(module, SITE_ATTRIBUTE, None)
    if site is None:
        raise ValueError(
            f"{type(module).__name__} runs a TISA attention function but was never patched with TISA. Load the "
            "model with tisa_hf (from_pretrained(..., tisa=...) or tisa_hf.patch) instead of setting "
            "config._attn_implementation by hand."
        )
    layer = site.layer_index(kwargs)
    kernels = site.kernels()
    return (kernels if kernels is not None and kernels.enabled else None), layer


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
    if kernels is None:
        return sdpa_attention_forward(
            module, query, key, value, attention_mask, dropout=dropout, scaling=scaling, is_causal=is_causal, **kwargs
        )
    length, dtype = query.shape[2], bias_dtype(query)
    if not kernels.needs_grad() and not kernels.fits_cache(length, dtype):
        bias = ToeplitzBias(kernels.offset_values(layer, length, dtype), length)
        output = blockwise_biased_sdpa(query, key, value, attention_mask, bias, dropout, scaling)
        return output.transpose(1, 2).contiguous(), None
    mask = merge_bias(attention_mask, kernels(layer, length, dtype))
    if takes_fused_bias_path(query, key, mask, dropout) and not any(
        kwargs.get(name) is not None for name in _UNSUPPORTED_FUSED_KWARGS
    ):
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
    """Flex attention with the layer's TISA bias as its `position_bias` score modification."""
    kernels, layer = _site_bias(module, query, kwargs)
    if kernels is not None:
        bias = kernels(layer, query.shape[2], bias_dtype(query))
        kwargs["position_bias"] = bias.expand(query.shape[0], -1, -1, -1)
    return flex_attention_forward(module, query, key, value, attention_mask, scaling=scaling, **kwargs)


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

    def rows(self, start: int, stop: int) -> torch.Tensor:
        """Rows start .. stop-1 of the bias: (1, heads, stop - start, n)."""
        return toeplitz_from_offsets(self.values, self.length, start, stop).unsqueeze(0)


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
    for start in range(0, length, block):
        stop = min(start + block, length)
        block_mask = mask[..., start:stop, :] if mask is not None and mask.shape[-2] > 1 else mask
        outputs.append(
            torch.nn.functional.scaled_dot_product_attention(
                query[:, :, start:stop],
                key,
                value,
                attn_mask=merge_bias(block_mask, bias.rows(start, stop)),
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
        probabilities = probabilities.sub_(logsumexp.unsqueeze(-1).to(probabilities.dtype)).exp_()
        grad_value = torch.matmul(probabilities.transpose(-1, -2), grad_output)
        row_dot = (grad_output * output).sum(-1, keepdim=True)
        grad_scores = torch.matmul(grad_output, value.transpose(-1, -2)).sub_(row_dot).mul_(probabilities)
        del probabilities
        grad_query = torch.matmul(grad_scores, key).mul_(scale)
        grad_key = torch.matmul(grad_scores.transpose(-1, -2), query).mul_(scale)
        grad_bias = grad_scores.sum_to_size(bias.shape) if ctx.needs_input_grad[3] else None
        return grad_query, grad_key, grad_value, grad_bias, None


def takes_fused_bias_path(query: torch.Tensor, key: torch.Tensor, mask: torch.Tensor | None, dropout: float) -> bool:
    """Whether a call would leave PyTorch's fused CPU kernel only because its float mask requires a gradient."""
    return (
        mask is not None
        and mask.requires_grad
        and torch.is_grad_enabled()
        and query.device.type == "cpu"
        and query.dtype in _FUSED_DTYPES
        and mask.dtype == query.dtype
        and mask.dim() == 4
        and query.shape[1] == key.shape[1]
        and not dropout
    )
