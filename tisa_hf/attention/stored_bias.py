"""The two routes through transformers' own sdpa function: plain attention where a layer has no kernels, and SDPA
with the layer's bias stored in the additive mask (PyTorch then picks its backend)."""

from __future__ import annotations

import torch
from transformers.integrations.sdpa_attention import sdpa_attention_forward

from .route import SdpaCall, SdpaRoute


class PlainRoute(SdpaRoute):
    name = "sdpa"

    def applies(self, call: SdpaCall) -> bool:
        return call.kernels is None

    def run(self, call: SdpaCall) -> tuple[torch.Tensor, None]:
        return sdpa_attention_forward(
            call.module,
            call.query,
            call.key,
            call.value,
            call.mask,
            dropout=call.dropout,
            scaling=call.scaling,
            is_causal=call.is_causal,
            **call.kwargs,
        )


class StoredBiasRoute(SdpaRoute):
    """Every call no other route takes."""

    name = "SDPA + stored bias"

    def applies(self, call: SdpaCall) -> bool:
        return True

    def run(self, call: SdpaCall) -> tuple[torch.Tensor, None]:
        mask = call.biased_mask()
        query = query_for_bias_only_backward(call.query, call.key, call.value, mask)
        return sdpa_attention_forward(
            None,  # the module would repeat grouped key-value heads, which come repeated (`key_value_per_head`)
            query,
            call.key,
            call.value,
            mask,
            dropout=call.dropout,
            scaling=call.scaling,
            is_causal=False,
            **call.kwargs,
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
