"""TISA model types: how a TISA checkpoint declares itself and loads strictly.

Every supported architecture gets a config class and model classes of its own, built from transformers' classes
and registered with `AutoConfig` and the `AutoModel*` classes when `tisa_hf` is imported:

- `model_type` is `tisa_hf_<base type>` (`tisa_hf_bert`, ...). A saved TISA model therefore fails to load
  without tisa_hf, with transformers' own error naming that model type, instead of loading silently without its
  kernels; with `import tisa_hf` the Auto classes load it as it was saved. `trust_remote_code` is never needed.
- The config carries `tisa` (a `TisaConfig` as a dict); the model classes are transformers' classes plus the
  kernel module, the attention sites and TISA's attention implementations (`tisa_sdpa` for `sdpa`, ...).
- Loading is strict: kernels missing from a TISA checkpoint, or holding NaN or inf values, are errors, and a
  `tisa=` that contradicts the checkpoint's own settings is refused before any weights are read. Converting a
  plain checkpoint (`tisa=` on a config without TISA) initialises the kernels quietly, with one INFO line.
"""

from __future__ import annotations

import logging
from typing import Any

import transformers.models.auto.modeling_auto as auto_models
from transformers import AutoConfig, PreTrainedConfig, PreTrainedModel
from transformers.utils.generic import is_flash_attention_requested

from .adapters import ADAPTERS, EncoderAdapter, adapter_for, base_model_type, tisa_model_type
from .attention import BIAS_ATTRIBUTE, plain_implementation, tisa_implementation
from .config import TisaConfig
from .patching import attach_tisa, check_finite_kernels, initialize_tisa, tisa_bias_module

logger = logging.getLogger(__name__)

HUB_KWARGS = ("cache_dir", "force_download", "local_files_only", "proxies", "revision", "subfolder", "token")
_TISA_CONFIG_CLASSES: dict[type[PreTrainedConfig], type[PreTrainedConfig]] = {}
_TISA_MODEL_CLASSES: dict[type[PreTrainedModel], type[PreTrainedModel]] = {}


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

    @classmethod
    def get_config_dict(cls, *args, **kwargs) -> tuple[dict[str, Any], dict[str, Any]]:
        """Reads a TISA or a plain checkpoint's config as this TISA type (a plain one gains `tisa` from kwargs)."""
        config_dict, kwargs = super().get_config_dict(*args, **kwargs)
        return {**config_dict, "model_type": cls.model_type}, kwargs


class TisaModelMixin:
    """A transformers model class with TISA: attached in `__init__`, strict in `from_pretrained`."""

    def __init__(self, config: PreTrainedConfig, *args, **kwargs):
        if not getattr(config, "tisa", None):
            raise ValueError(
                f"{type(self).__name__} needs a config with TISA settings; build it with "
                "tisa_hf.tisa_model_config(config, tisa_hf.TisaConfig(...))."
            )
        super().__init__(config, *args, **kwargs)
        tisa = TisaConfig.from_value(config.tisa)
        base, adapter = self.base_model, adapter_for(config.model_type)
        attach_tisa(base, adapter, tisa)
        bias = tisa_bias_module(base)
        if bias is not None and not bias.amplitude.is_meta:  # built to be trained, not to be loaded
            initialize_tisa(base, adapter, tisa)

    def _check_and_adjust_attn_implementation(
        self, attn_implementation: str | None, is_init_check: bool = False, allow_all_kernels: bool = False
    ) -> str:
        """Maps the requested backend to TISA's own function for it (`sdpa` -> `tisa_sdpa`)."""
        requested = plain_implementation(attn_implementation)
        if requested is not None and is_flash_attention_requested(requested_attention_implementation=requested):
            raise ValueError(
                f"TISA adds a bias to the attention logits, which attn_implementation={requested!r} cannot take. "
                "Load the model with attn_implementation='sdpa' (or 'eager', 'flex_attention')."
            )
        checked = super()._check_and_adjust_attn_implementation(requested, is_init_check, allow_all_kernels)
        return tisa_implementation(checked)

    def _adjust_missing_and_unexpected_keys(self, loading_info) -> None:
        """Takes the kernel keys out of the missing ones (no load-report table for them): `from_pretrained`
        decides what their absence means."""
        self._tisa_missing_keys = {key for key in loading_info.missing_keys if _is_kernel_key(key)}
        loading_info.missing_keys = set(loading_info.missing_keys) - self._tisa_missing_keys
        super()._adjust_missing_and_unexpected_keys(loading_info)

    @classmethod
    def from_pretrained(
        cls,
        pretrained_model_name_or_path,
        *model_args,
        tisa: TisaConfig | dict | bool | None = None,
        tisa_reinitialize: bool = False,
        **kwargs,
    ):
        """Loads a TISA checkpoint as saved, or converts a plain one (`tisa=...`).

        `tisa_reinitialize=True` starts kernels that a TISA checkpoint lacks afresh, by its `init`, on purpose.
        """
        wants_info = kwargs.pop("output_loading_info", False)
        hub_kwargs = {name: kwargs[name] for name in HUB_KWARGS if name in kwargs}
        saved = PreTrainedConfig.get_config_dict(pretrained_model_name_or_path, **hub_kwargs)[0].get("tisa")
        config = kwargs.pop("config", None)
        if isinstance(config, PreTrainedConfig):
            config = to_tisa_config(config, tisa if tisa is not None else getattr(config, "tisa", None) or saved)
        elif tisa is not None:
            kwargs["tisa"] = tisa
        requested = getattr(config, "tisa", None) or (TisaConfig.from_value(tisa).to_dict() if tisa else saved)
        if requested is None:
            raise ValueError(
                f"{pretrained_model_name_or_path} has no TISA settings: pass tisa=tisa_hf.TisaConfig(...) to "
                "convert it."
            )
        if saved is not None and TisaConfig.from_value(saved) != TisaConfig.from_value(requested):
            raise ValueError(
                f"{pretrained_model_name_or_path} was saved with TISA {TisaConfig.from_value(saved)}, and its kernels "
                f"belong to those settings; tisa= asks for {TisaConfig.from_value(requested)}. Load it without tisa=, "
                "or convert the plain checkpoint it came from."
            )
        if config is not None:
            kwargs["config"] = config
        model, info = super().from_pretrained(
            pretrained_model_name_or_path, *model_args, output_loading_info=True, **kwargs
        )
        missing = sorted(getattr(model, "_tisa_missing_keys", ()))
        base, adapter = model.base_model, adapter_for(model.config.model_type)
        tisa_config = TisaConfig.from_value(model.config.tisa)
        if saved is None or (missing and tisa_reinitialize):
            initialize_tisa(base, adapter, tisa_config)
        elif missing:
            raise ValueError(
                f"{pretrained_model_name_or_path} declares TISA {tisa_config} but its weights lack "
                f"{', '.join(missing)}. Pass tisa_reinitialize=True to start the kernels afresh (init="
                f"{tisa_config.init!r}) on purpose, or use a checkpoint that holds them."
            )
        else:
            check_finite_kernels(base, f"loaded from {pretrained_model_name_or_path}")
        return (model, info) if wants_info else model


def _is_kernel_key(key: str) -> bool:
    return f"{BIAS_ATTRIBUTE}." in f".{key}" and key.rsplit(".", 1)[-1] in ("amplitude", "sharpness", "center")


def tisa_config_class(config_class: type[PreTrainedConfig]) -> type[PreTrainedConfig]:
    """The TISA config class of an architecture's config class (itself if it is one)."""
    if issubclass(config_class, TisaConfigMixin):
        return config_class
    if config_class not in _TISA_CONFIG_CLASSES:
        _TISA_CONFIG_CLASSES[config_class] = type(
            f"Tisa{config_class.__name__}",
            (TisaConfigMixin, config_class),
            {"model_type": tisa_model_type(config_class.model_type), "__module__": __name__},
        )
    return _TISA_CONFIG_CLASSES[config_class]


def tisa_model_class(model_class: type[PreTrainedModel]) -> type[PreTrainedModel]:
    """The TISA class of an architecture's model class (itself if it is one)."""
    if issubclass(model_class, TisaModelMixin):
        return model_class
    if model_class not in _TISA_MODEL_CLASSES:
        _TISA_MODEL_CLASSES[model_class] = type(
            f"Tisa{model_class.__name__}",
            (TisaModelMixin, model_class),
            {"config_class": tisa_config_class(model_class.config_class), "__module__": __name__},
        )
    return _TISA_MODEL_CLASSES[model_class]


def to_tisa_config(config: PreTrainedConfig, tisa: TisaConfig | dict | bool) -> PreTrainedConfig:
    """A new TISA config with `config`'s settings and `tisa`; `config` itself is left untouched."""
    settings = {key: value for key, value in config.to_dict().items() if key not in ("model_type", "tisa")}
    adapter = adapter_for(config.model_type)
    new = tisa_config_class(adapter.config_class).from_dict(settings)
    new.tisa = tisa
    new._attn_implementation_internal = config._attn_implementation
    return new


def plain_model_config(config: PreTrainedConfig) -> PreTrainedConfig:
    """The architecture's own config with `config`'s settings and no TISA (for the unpatched counterpart)."""
    settings = {key: value for key, value in config.to_dict().items() if key not in ("model_type", "tisa")}
    return adapter_for(config.model_type).config_class.from_dict(settings)


def tisa_model_config(config: PreTrainedConfig, tisa: TisaConfig | dict | bool = True) -> PreTrainedConfig:
    """The TISA config of a supported architecture's config: `AutoModel*.from_config` builds a TISA model from it."""
    return to_tisa_config(config, tisa)


def register_tisa_classes(adapter: EncoderAdapter) -> None:
    """Registers the TISA config class and the TISA class of every Auto mapping the architecture appears in."""
    config_class = tisa_config_class(adapter.config_class)
    AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
    for name in dir(auto_models):
        auto_class = getattr(auto_models, name)
        mapping = getattr(auto_class, "_model_mapping", None)
        if not name.startswith("AutoModel") or mapping is None or adapter.config_class not in mapping:
            continue
        model_class = mapping[adapter.config_class]
        if isinstance(model_class, type) and issubclass(model_class, PreTrainedModel):
            auto_class.register(config_class, tisa_model_class(model_class), exist_ok=True)


def register_adapter(adapter: EncoderAdapter) -> None:
    """Makes a new encoder architecture patchable: its adapter, and its TISA types registered with the Auto classes."""
    ADAPTERS[adapter.model_type] = adapter
    register_tisa_classes(adapter)


def is_tisa_model_type(model_type: str) -> bool:
    return base_model_type(model_type) != model_type
