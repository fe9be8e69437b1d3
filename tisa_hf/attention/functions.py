"""TISA's attention functions, registered with transformers' `AttentionInterface` (and the same names with
`AttentionMaskInterface`, which builds their padding masks as for the plain backends) when `tisa_hf` is imported. A
TISA model's config selects them (`config._attn_implementation == "tisa_sdpa"`, say); transformers' own entries are
never replaced, so every other model computes exactly what it did before.

Each function reads its module's `AttentionSite` (set when the model was patched), takes that layer's bias from the
encoder's kernel module and hands the logits' bias to the plain backend:
- `tisa_eager`: the bias merged into the additive mask; `output_attentions=True` returns probabilities with it.
- `tisa_sdpa`: as `sdpa`, on the route its policy chooses (`policy.py`).
- `tisa_flex_attention`: flex attention whose score modification adds the layer's offset values (`flex.py`).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn
from transformers import AttentionInterface
from transformers.integrations.flex_attention import flex_attention_forward
from transformers.masking_utils import AttentionMaskInterface, eager_mask, flex_attention_mask, sdpa_mask

from ..errors import UsageError
from . import logits
from .flex import flex_refusal, offset_table_flex_attention
from .length_scale import length_scale_from, length_scaled_query
from .logits import bias_dtype
from .policy import SDPA_POLICY_KWARG, call_policy
from .route import SdpaCall
from .sites import site_kernels


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
    kernels, layer = site_kernels(module, kwargs)
    query = length_scaled_query(module, query, attention_mask)
    key, value = logits.key_value_per_head(module, key, value)
    if kernels is not None:
        causal = logits.masks_causally_itself(module, kwargs.get("is_causal"), attention_mask, query)
        attention_mask = logits.biased_mask(kernels, layer, query, key, attention_mask, causal)
    return logits.math_attention(query, key, value, attention_mask, scaling, dropout, module.training)


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
    """transformers' sdpa attention with the layer's TISA bias, on the route its policy chooses (`policy.py`)."""
    policy = kwargs.pop(SDPA_POLICY_KWARG, None) or call_policy()
    kernels, layer = site_kernels(module, kwargs)
    query = length_scaled_query(module, query, attention_mask)
    if kernels is not None:  # transformers' sdpa, the route without kernels, takes grouped heads as they are
        key, value = logits.key_value_per_head(module, key, value)
    call = SdpaCall(query, key, value, attention_mask, dropout, scaling, kernels, layer, module, is_causal, kwargs)
    return policy.choose(call).run(call)


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
    kernels, layer = site_kernels(module, kwargs)
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
    key, value = logits.key_value_per_head(module, key, value)
    table = kernels.offset_values(layer, query.shape[2], bias_dtype(query))
    output = offset_table_flex_attention(
        query, key, value, attention_mask, table, scaling, module.training, kwargs.get("kernel_options")
    )
    return output.transpose(1, 2).contiguous(), None


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
