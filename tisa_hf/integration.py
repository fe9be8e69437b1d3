"""What `import tisa_hf` does to transformers, all of it additive:

- registers TISA's attention functions under names of their own (`tisa_sdpa`, ...) and the TISA model types
  (`tisa_hf_bert`, ...) with the Auto classes; transformers' own entries are never replaced;
- lets `from_pretrained` (and `from_config`) of transformers' own classes hand a model that asks for TISA, by
  `tisa=...` or by a config written by tisa-hf 0.1 (a plain model type carrying a `tisa` dict), to its TISA class.
  Every other call reaches transformers' function unchanged, with the same arguments.
"""

from __future__ import annotations

import functools

from transformers import PreTrainedConfig, PreTrainedModel

from .adapters import ADAPTERS, BUILTIN_ADAPTERS, adapter_for
from .attention import register_attention_functions
from .modeling import TisaModelMixin, register_adapter, tisa_model_class, to_tisa_config

_INSTALLED_MARK = "_tisa_hf_installed"


def _legacy_tisa(config: object) -> dict | None:
    """The `tisa` dict of a plain-type config written by tisa-hf 0.1 (or built with `tisa=`), else None."""
    return config.__dict__.get("tisa") if isinstance(config, PreTrainedConfig) else None


def _is_plain_class(cls: type) -> bool:
    """A transformers class (not a TISA one) of a supported architecture."""
    return not issubclass(cls, TisaModelMixin) and getattr(cls.config_class, "model_type", None) in ADAPTERS


def _tisa_class(cls: type) -> type:
    """The TISA class for a class asked for TISA; an unsupported architecture is an error naming the supported."""
    adapter_for(cls.config_class.model_type)
    return tisa_model_class(cls)


def _from_pretrained(original):
    @functools.wraps(original)
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        if issubclass(cls, TisaModelMixin):
            return original.__func__(cls, pretrained_model_name_or_path, *model_args, **kwargs)
        tisa = kwargs.pop("tisa", None)
        config = kwargs.get("config")
        legacy = _legacy_tisa(config)
        if tisa is None and legacy is None:
            model = original.__func__(cls, pretrained_model_name_or_path, *model_args, **kwargs)
            legacy = _legacy_tisa(model.config)
            if legacy is None or not _is_plain_class(cls):
                return model
            kwargs["config"] = model.config  # a 0.1 checkpoint loaded by a class: load it again, with its kernels
            del model
        if isinstance(kwargs.get("config"), PreTrainedConfig):
            kwargs["config"] = to_tisa_config(kwargs["config"], legacy or tisa)
        return _tisa_class(cls).from_pretrained(pretrained_model_name_or_path, *model_args, tisa=tisa, **kwargs)

    return classmethod(from_pretrained)


def _from_config(original):
    @functools.wraps(original)
    def from_config(cls, config, **kwargs):
        legacy = _legacy_tisa(config)
        if legacy is None or issubclass(cls, TisaModelMixin):
            return original.__func__(cls, config, **kwargs)
        return _tisa_class(cls)._from_config(to_tisa_config(config, legacy), **kwargs)

    return classmethod(from_config)


def install() -> None:
    """Registers the attention functions and model types and installs the `from_pretrained` hand-over (idempotent)."""
    register_attention_functions()
    for adapter in BUILTIN_ADAPTERS:
        register_adapter(adapter)
    if getattr(PreTrainedModel, _INSTALLED_MARK, False):
        return
    PreTrainedModel.from_pretrained = _from_pretrained(PreTrainedModel.from_pretrained)
    PreTrainedModel._from_config = _from_config(PreTrainedModel._from_config)
    setattr(PreTrainedModel, _INSTALLED_MARK, True)
