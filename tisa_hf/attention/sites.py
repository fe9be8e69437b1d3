"""The attention site of a module TISA patched: its layer and the encoder's kernels, read at every call."""

from __future__ import annotations

from torch import nn

from ..adapters import AttentionSite
from ..kernels import TisaPositionBias
from ..names import SITE_ATTRIBUTE


def site_of(module: nn.Module) -> AttentionSite:
    site: AttentionSite | None = getattr(module, SITE_ATTRIBUTE, None)
    if site is None:
        raise ValueError(
            f"{type(module).__name__} runs a TISA attention function but was never patched with TISA. Load the "
            "model with tisa_hf (from_pretrained(..., tisa=...) or tisa_hf.patch) instead of setting "
            "config._attn_implementation by hand."
        )
    return site


def site_kernels(module: nn.Module, kwargs: dict) -> tuple[TisaPositionBias | None, int]:
    """The encoder's kernels for this call (None: S = 0, or switched off) and the call's TISA layer (taken out of
    `kwargs`)."""
    site = site_of(module)
    layer = site.layer_index(kwargs)
    kernels = site.kernels()
    return (kernels if kernels is not None and kernels.enabled else None), layer
