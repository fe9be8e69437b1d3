"""Hooks into transformers so that `from_pretrained(..., tisa=...)` and TISA checkpoints just work.

Installed once by `import tisa_hf`:
- every config accepts a `tisa` attribute, validated on assignment and stored as a plain dict (so
  `from_pretrained` routes the kwarg to the config, and config.json stores it);
- `PreTrainedModel.post_init` patches a supported base encoder whose config carries `tisa`, and rejects
  unsupported model types;
- `PreTrainedModel.from_pretrained` initialises kernels that the checkpoint lacks (and only those).
"""

from __future__ import annotations

import functools
import logging

from transformers import PreTrainedConfig, PreTrainedModel

from .adapters import adapter_for
from .config import TisaConfig
from .patching import BIAS_ATTRIBUTE, apply_tisa, initialize_tisa, is_patched, tisa_bias_module

logger = logging.getLogger(__name__)

_INSTALLED_MARK = "_tisa_hf_installed"


def _get_tisa(config: PreTrainedConfig) -> dict | None:
    return config.__dict__.get("tisa")


def _set_tisa(config: PreTrainedConfig, value: TisaConfig | dict | bool | None) -> None:
    config.__dict__["tisa"] = TisaConfig.from_value(value).to_dict() if value not in (None, False) else None


def _tisa_post_init(original):
    @functools.wraps(original)
    def post_init(self: PreTrainedModel) -> None:
        original(self)
        value = getattr(self.config, "tisa", None)
        if not value:
            return
        config = TisaConfig.from_value(value)
        adapter = adapter_for(self.config.model_type)
        if not isinstance(self, adapter.base_model_class) or is_patched(self):
            return
        apply_tisa(self, adapter, config)
        bias = tisa_bias_module(self)
        if bias is not None and not bias.amplitude.is_meta:
            initialize_tisa(self, adapter, config)

    return post_init


def _tisa_from_pretrained(original):
    @functools.wraps(original)
    def from_pretrained(cls, *args, **kwargs):
        wants_info = kwargs.pop("output_loading_info", False)
        model, info = original.__func__(cls, *args, output_loading_info=True, **kwargs)
        missing = {key for key in info["missing_keys"] if f"{BIAS_ATTRIBUTE}." in key}
        if missing:
            base = model.base_model
            config = TisaConfig.from_value(model.config.tisa)
            logger.warning(
                "The checkpoint has no TISA kernels (%s); initialising them with init=%r.",
                ", ".join(sorted(missing)),
                config.init,
            )
            initialize_tisa(base, adapter_for(model.config.model_type), config)
            info["missing_keys"] = set(info["missing_keys"]) - missing
        return (model, info) if wants_info else model

    return classmethod(from_pretrained)


def install() -> None:
    """Installs the hooks (idempotent)."""
    if getattr(PreTrainedModel, _INSTALLED_MARK, False):
        return
    PreTrainedConfig.tisa = property(_get_tisa, _set_tisa, doc="TISA settings (a TisaConfig dict) or None.")
    PreTrainedModel.post_init = _tisa_post_init(PreTrainedModel.post_init)
    PreTrainedModel.from_pretrained = _tisa_from_pretrained(PreTrainedModel.from_pretrained)
    setattr(PreTrainedModel, _INSTALLED_MARK, True)
