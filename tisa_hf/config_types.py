"""The configs of TISA model types: an architecture's config plus `tisa`, saved as `model_type: tisa_hf_<type>`.

Light on purpose (no model code): the config types are registered with `AutoConfig` as soon as transformers'
Auto configs are imported, and the model classes of a type once one of its configs exists (see `modeling`).
"""

from __future__ import annotations

import functools
from typing import Any

from transformers import PreTrainedConfig

from .adapters import EncoderAdapter, adapter_for
from .config import TisaConfig
from .names import plain_implementation, tisa_implementation, tisa_model_type


class TisaConfigMixin:
    """The config of a TISA model: its architecture's config plus `tisa`, stored in config.json."""

    @property
    def tisa(self) -> dict[str, Any] | None:
        return self.__dict__.get("tisa")

    @tisa.setter
    def tisa(self, value: TisaConfig | dict | bool | None) -> None:
        self.__dict__["tisa"] = None if value is None else TisaConfig.from_value(value).to_dict()

    @property
    def _attn_implementation(self) -> str | None:
        return self._attn_implementation_internal

    @_attn_implementation.setter
    def _attn_implementation(self, value: str | dict | None) -> None:
        """A TISA config only ever names TISA's attention functions: `sdpa` is stored as `tisa_sdpa`."""
        self._attn_implementation_internal = tisa_implementation(value) if isinstance(value, str) else value

    @property
    def output_attentions(self) -> bool:
        return self._output_attentions

    @output_attentions.setter
    def output_attentions(self, value: bool) -> None:
        if value and plain_implementation(self._attn_implementation) not in ("eager", None):
            raise ValueError(
                "output_attentions needs attn_implementation='eager' (attention probabilities with the TISA bias); "
                f"this model uses {self._attn_implementation!r}."
            )
        self._output_attentions = value

    def validate_output_attentions(self) -> None:
        self.output_attentions = self.output_attentions

    def __post_init__(self, **kwargs) -> None:
        super().__post_init__(**kwargs)
        # The model classes of this type go into the AutoModel* mappings once such a config exists: here, at run
        # time, where importing model code is safe (tisa_hf's import hooks run while transformers imports).
        from .modeling import register_model_classes

        register_model_classes(adapter_for(self.model_type))

    @classmethod
    def get_config_dict(cls, *args, **kwargs) -> tuple[dict[str, Any], dict[str, Any]]:
        """Reads a TISA or a plain checkpoint's config as this TISA type (a plain one gains `tisa` from kwargs)."""
        config_dict, kwargs = super().get_config_dict(*args, **kwargs)
        return {**config_dict, "model_type": cls.model_type}, kwargs


def tisa_config_class(config_class: type[PreTrainedConfig]) -> type[PreTrainedConfig]:
    """The TISA config class of an architecture's config class (itself if it is one)."""
    if issubclass(config_class, TisaConfigMixin):
        return config_class
    return _build_tisa_config_class(config_class)


@functools.cache
def _build_tisa_config_class(config_class: type[PreTrainedConfig]) -> type[PreTrainedConfig]:
    return type(
        f"Tisa{config_class.__name__}",
        (TisaConfigMixin, config_class),
        {"model_type": tisa_model_type(config_class.model_type), "__module__": __name__},
    )


def _architecture_settings(config: PreTrainedConfig) -> dict[str, Any]:
    """A config's settings without its model type and TISA settings: what both kinds of config share."""
    return {key: value for key, value in config.to_dict().items() if key not in ("model_type", "tisa")}


def to_tisa_config(config: PreTrainedConfig, tisa: TisaConfig | dict | bool) -> PreTrainedConfig:
    """A new TISA config with `config`'s settings and `tisa`; `config` itself is left untouched."""
    adapter = adapter_for(config.model_type)
    new = tisa_config_class(adapter.config_class).from_dict(_architecture_settings(config))
    new.tisa = tisa
    new._attn_implementation_internal = config._attn_implementation
    return new


def plain_model_config(config: PreTrainedConfig) -> PreTrainedConfig:
    """The architecture's own config with `config`'s settings and no TISA (for the unpatched counterpart)."""
    return adapter_for(config.model_type).config_class.from_dict(_architecture_settings(config))


def tisa_model_config(config: PreTrainedConfig, tisa: TisaConfig | dict | bool = True) -> PreTrainedConfig:
    """The TISA config of a supported architecture's config: `AutoModel*.from_config` builds a TISA model from it."""
    return to_tisa_config(config, tisa)


def register_config_type(adapter: EncoderAdapter) -> None:
    """Registers the architecture's TISA config type with `AutoConfig` (idempotent)."""
    from transformers import AutoConfig

    config_class = tisa_config_class(adapter.config_class)
    AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
