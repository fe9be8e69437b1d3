"""The attention site of a module TISA patched: its layer and the encoder's kernels, read at every call."""

from __future__ import annotations

import copy
from typing import Any

from torch import nn
from transformers import PreTrainedConfig

from ..adapters import AttentionSite
from ..kernels import TisaPositionBias
from ..names import SITE_ATTRIBUTE, tisa_implementation


class SiteConfig:
    """The config a TISA attention site reads as `self.config`: the model's own config, live, except that the
    attention implementation it names (`sdpa`) reads as TISA's function for it (`tisa_sdpa`).

    transformers' attention modules look their function up by `self.config._attn_implementation` in the global
    `ALL_ATTENTION_FUNCTIONS`. Through this view TISA's sites run TISA's functions while the model's config keeps
    transformers' names (`eager`, `sdpa`, `flex_attention`) for every reader of it, and every other module (a
    decoder's cross-attention, any other model) runs transformers' function for the name, untouched."""

    __slots__ = ("config",)

    def __init__(self, config: PreTrainedConfig):
        object.__setattr__(self, "config", config)

    @property
    def _attn_implementation(self) -> str | None:
        return tisa_implementation(self.config._attn_implementation)

    def __getattr__(self, name: str) -> Any:
        return getattr(object.__getattribute__(self, "config"), name)

    def __setattr__(self, name: str, value: Any) -> None:
        setattr(self.config, name, value)

    def __deepcopy__(self, memo: dict) -> SiteConfig:
        return SiteConfig(copy.deepcopy(self.config, memo))  # the copied model's config, copied once in `memo`

    def __reduce__(self) -> tuple:
        return SiteConfig, (self.config,)

    def __repr__(self) -> str:
        return f"SiteConfig({self.config!r})"


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
