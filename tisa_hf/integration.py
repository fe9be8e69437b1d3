"""What `import tisa_hf` does to transformers, all of it additive:

- the TISA config types (`tisa_hf_bert`, ...) are registered with `AutoConfig`; their model classes join the
  `AutoModel*` mappings when the first config of the type exists (that imports the architecture's model code only
  when it is used);
- TISA's attention functions are registered under names of their own (`tisa_sdpa`, ...);
- `from_pretrained` / `from_config` of transformers' classes hand a model that asks for TISA (`tisa=...`, or a
  config written by tisa-hf 0.1: a plain model type carrying a `tisa` dict) to its TISA class. Every other call
  reaches transformers' function unchanged, with the same arguments.

transformers' own entries are never replaced.
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from transformers import PreTrainedConfig, PreTrainedModel

from .adapters import ADAPTERS, adapter_for
from .attention import register_attention_functions
from .model_configs import TisaConfigMixin, register_config_type, tisa_model_config
from .modeling import TisaModelMixin, register_model_classes, tisa_model_class
from .names import TISA_MODEL_TYPE_PREFIX

_INSTALLED_MARK = "_tisa_hf_installed"


def _legacy_tisa(config: object) -> dict | None:
    """The `tisa` dict of a plain-type config written by tisa-hf 0.1 (or built with `tisa=`), else None."""
    return config.__dict__.get("tisa") if isinstance(config, PreTrainedConfig) else None


def _saved_tisa_type(path: object) -> bool:
    """Whether `path` is a local folder whose config.json names a TISA model type (`tisa_hf_bert`, ...). Only a
    folder is looked at: a Hub id would cost a request on every plain model's load, and is handed over after its
    first load instead."""
    config_file = Path(str(path), "config.json")
    if not config_file.is_file():
        return False
    try:
        model_type = json.loads(config_file.read_text(encoding="utf-8")).get("model_type", "")
    except (OSError, ValueError, AttributeError):  # transformers' own load reports a damaged config
        return False
    return isinstance(model_type, str) and model_type.startswith(TISA_MODEL_TYPE_PREFIX)


def _is_tisa_class(cls: type) -> bool:
    return issubclass(cls, TisaModelMixin)


def _is_plain_class(cls: type) -> bool:
    """A transformers class (not a TISA one) of a supported architecture."""
    return not _is_tisa_class(cls) and getattr(cls.config_class, "model_type", None) in ADAPTERS


def _tisa_class(cls: type) -> type:
    """The TISA class for a class asked for TISA; an unsupported architecture is an error naming the supported."""
    adapter_for(cls.config_class.model_type)
    return tisa_model_class(cls)


def _from_pretrained(original):
    @functools.wraps(original)
    def from_pretrained(cls, pretrained_model_name_or_path, *model_args, **kwargs):
        if _is_tisa_class(cls):
            return original.__func__(cls, pretrained_model_name_or_path, *model_args, **kwargs)
        tisa = kwargs.pop("tisa", None)
        config = kwargs.get("config")
        legacy = _legacy_tisa(config)
        if tisa is None and config is None and _is_plain_class(cls) and _saved_tisa_type(pretrained_model_name_or_path):
            # A TISA checkpoint in a local folder, asked for by its plain class: straight to the TISA class, without
            # first loading it as the plain model (transformers' model-type warning, a report of the kernels as
            # unexpected weights, and the weights read twice)
            return _tisa_class(cls).from_pretrained(pretrained_model_name_or_path, *model_args, **kwargs)
        if tisa is None and legacy is None:
            loaded = original.__func__(cls, pretrained_model_name_or_path, *model_args, **kwargs)
            model = loaded[0] if kwargs.get("output_loading_info") else loaded  # (model, loading info)
            legacy = _legacy_tisa(model.config)
            if legacy is None or not _is_plain_class(cls):
                return loaded
            kwargs["config"] = model.config  # a 0.1 checkpoint loaded by a class: load it again, with its kernels
            del model, loaded
        if _legacy_tisa(kwargs.get("config")) is not None or (tisa is not None and kwargs.get("config") is not None):
            kwargs["config"] = tisa_model_config(kwargs["config"], legacy or tisa)
        return _tisa_class(cls).from_pretrained(pretrained_model_name_or_path, *model_args, tisa=tisa, **kwargs)

    return classmethod(from_pretrained)


def _from_config(original):
    @functools.wraps(original)
    def from_config(cls, config, **kwargs):
        legacy = _legacy_tisa(config)
        if legacy is None or _is_tisa_class(cls):
            return original.__func__(cls, config, **kwargs)
        return _tisa_class(cls)._from_config(tisa_model_config(config, legacy), **kwargs)

    return classmethod(from_config)


def install() -> None:
    """Registers the config types, the attention functions and the `from_pretrained` hand-over (idempotent)."""
    TisaConfigMixin.register_model_classes = staticmethod(register_model_classes)
    for adapter in ADAPTERS.values():
        if adapter.available:  # an architecture the installed transformers lacks is refused when asked for
            register_config_type(adapter)
    register_attention_functions()
    if getattr(PreTrainedModel, _INSTALLED_MARK, False):
        return
    PreTrainedModel.from_pretrained = _from_pretrained(PreTrainedModel.from_pretrained)
    PreTrainedModel._from_config = _from_config(PreTrainedModel._from_config)
    setattr(PreTrainedModel, _INSTALLED_MARK, True)
