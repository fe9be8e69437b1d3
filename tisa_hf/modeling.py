"""TISA model types: how a TISA checkpoint declares itself and loads strictly (`patching.patch` turns a model in memory
into its TISA type).

Every supported architecture gets a config class (`model_configs`) and model classes of its own, built from
transformers' classes and registered with `AutoConfig` and the `AutoModel*` classes:

- `model_type` is `tisa_hf_<base type>` (`tisa_hf_bert`, ...). A saved TISA model therefore fails to load
  without tisa_hf, with transformers' own error naming that model type, instead of loading silently without its
  kernels; with `import tisa_hf` the Auto classes load it as it was saved. `trust_remote_code` is never needed.
- The config carries `tisa` (a `TisaConfig`; a dict in config.json); the model classes are transformers' classes
  plus the kernel module and the attention sites, which run TISA's attention function for the backend the config
  names as transformers does (`tisa_sdpa` for `sdpa`, ...; `attention.sites.SiteConfig`).
- Loading is strict: kernels missing from a TISA checkpoint, or holding NaN or inf values, are errors, and a
  `tisa=` that contradicts the checkpoint's own settings is refused before any weights are read. Converting a
  plain checkpoint (`tisa=` on a config without TISA) initialises the kernels quietly, with one INFO line.
"""

from __future__ import annotations

import functools
import logging

import transformers.models.auto.modeling_auto as auto_models
from transformers import GenerationMixin, PreTrainedConfig, PreTrainedModel
from transformers.conversion_mapping import get_checkpoint_conversion_mapping, register_checkpoint_conversion_mapping
from transformers.utils.generic import is_flash_attention_requested

from .adapters import ADAPTERS, EncoderAdapter, adapter_for
from .attaching import attach_tisa, check_finite_kernels, initialize_tisa, tisa_bias_module, tisa_config_of
from .config import READING_SETTINGS, TisaConfig
from .kernels import KERNEL_PARAMETERS
from .model_configs import (
    TISA_CLASS_PREFIX,
    TisaConfigMixin,
    publish_class,
    register_config_type,
    tisa_config_class,
    tisa_model_config,
    transformers_base_class,
)
from .names import BIAS_ATTRIBUTE, plain_implementation

logger = logging.getLogger(__name__)

HUB_KWARGS = ("cache_dir", "force_download", "local_files_only", "proxies", "revision", "subfolder", "token")


class TisaModelMixin:
    """A transformers model class with TISA: attached in `__init__`, strict in `from_pretrained`."""

    def __init__(self, config: PreTrainedConfig, *args, **kwargs):
        if not isinstance(config, TisaConfigMixin) or config.tisa is None:
            raise ValueError(
                f"{type(self).__name__} needs a config with TISA settings; build it with "
                "tisa_hf.tisa_model_config(config, tisa_hf.TisaConfig(...))."
            )
        super().__init__(config, *args, **kwargs)
        base, adapter = self.base_model, adapter_for(config.model_type)
        attach_tisa(base, adapter)
        bias = tisa_bias_module(base)
        if bias is not None and not bias.amplitude.is_meta:  # built to be trained, not to be loaded
            initialize_tisa(base, adapter)

    @classmethod
    def is_custom_code(cls) -> bool:
        """Whether transformers treats the class as code from outside its package: as the stock class it extends.

        transformers takes a class defined outside its package for remote code, and then leaves a module whose own
        parameters are all initialised (a module with none, too) to itself, so a parent's `_init_weights` that
        initialises its children (ModernBERT's attention and MLP) never runs on loading: the weights a checkpoint
        lacks would start from another distribution than the stock class gives them."""
        stock = next(
            base
            for base in cls.__mro__[1:]
            if issubclass(base, PreTrainedModel) and not issubclass(base, TisaModelMixin)
        )
        return stock.is_custom_code()

    def _check_and_adjust_attn_implementation(self, attn_implementation: str | None, *args, **kwargs) -> str:
        """transformers' check of the requested backend (TISA's name for it, `tisa_sdpa`, read as `sdpa`), refusing
        the backends that cannot add a bias to the logits; its other arguments pass through as they came (their
        list grew within 5.x)."""
        requested = plain_implementation(attn_implementation)
        if requested is not None and is_flash_attention_requested(requested_attention_implementation=requested):
            raise ValueError(
                f"TISA adds a bias to the attention logits, which attn_implementation={requested!r} cannot take. "
                "Load the model with attn_implementation='sdpa' (or 'eager', 'flex_attention')."
            )
        if requested == "flex_attention" and getattr(self.config, "is_decoder", False):
            raise ValueError(
                "A TISA decoder (is_decoder=True) runs with attn_implementation='sdpa' or 'eager': transformers' "
                "causal block mask for flex attention does not mask this model causally. Load it with "
                "attn_implementation='sdpa'."
            )
        return super()._check_and_adjust_attn_implementation(requested, *args, **kwargs)

    def _adjust_missing_and_unexpected_keys(self, loading_info) -> None:
        """Takes the kernel keys out of the missing ones (no load-report table for them): `from_pretrained`
        decides what their absence means. Where the checkpoint holds none of the model's weights, nothing of it is
        TISA's checkpoint: the kernels stay in transformers' report of missing weights, with all the others, and
        start by their `init` as the others start by theirs."""
        missing = set(loading_info.missing_keys)
        kernel_keys = {key for key in missing if _is_kernel_key(key)}
        self._tisa_nothing_loaded = bool(kernel_keys) and set(self.state_dict()) <= missing
        self._tisa_missing_keys = set() if self._tisa_nothing_loaded else kernel_keys
        loading_info.missing_keys = missing - self._tisa_missing_keys
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
        config = kwargs.pop("config", None)
        saved = _saved_tisa_settings(pretrained_model_name_or_path, config, hub_kwargs)
        source = "the state_dict" if pretrained_model_name_or_path is None else pretrained_model_name_or_path
        if isinstance(config, PreTrainedConfig):
            config = tisa_model_config(config, tisa if tisa is not None else getattr(config, "tisa", None) or saved)
        elif tisa is not None:
            kwargs["tisa"] = tisa
        requested = getattr(config, "tisa", None) or (TisaConfig.from_value(tisa) if tisa else saved)
        if requested is None:
            raise ValueError(f"{source} has no TISA settings: pass tisa=tisa_hf.TisaConfig(...) to convert it.")
        if saved is not None and (
            TisaConfig.from_value(saved).kernel_settings() != TisaConfig.from_value(requested).kernel_settings()
        ):
            raise ValueError(
                f"{source} was saved with TISA {TisaConfig.from_value(saved)}, and its kernels "
                f"belong to those settings; tisa= asks for {TisaConfig.from_value(requested)}. Load it without tisa= "
                f"(or change only {', '.join(READING_SETTINGS)}), or convert the plain checkpoint it came from."
            )
        if config is not None:
            kwargs["config"] = config
        model, info = super().from_pretrained(
            pretrained_model_name_or_path, *model_args, output_loading_info=True, **kwargs
        )
        missing = sorted(getattr(model, "_tisa_missing_keys", ()))
        base, adapter = model.base_model, adapter_for(model.config.model_type)
        tisa_config = tisa_config_of(model)
        if saved is None or model._tisa_nothing_loaded or (missing and tisa_reinitialize):
            initialize_tisa(base, adapter)
        elif missing:
            raise ValueError(
                f"{source} declares TISA {tisa_config} but its weights lack "
                f"{', '.join(missing)}. Pass tisa_reinitialize=True to start the kernels afresh (init="
                f"{tisa_config.init!r}) on purpose, or use a checkpoint that holds them."
            )
        else:
            check_finite_kernels(base, f"loaded from {source}")
        return (model, info) if wants_info else model


def _saved_tisa_settings(path, config: PreTrainedConfig | None, hub_kwargs: dict) -> dict | TisaConfig | None:
    """The TISA settings the weights were saved with: those of the checkpoint's config.json, or, without a path
    (`from_pretrained(None, config=..., state_dict=...)`), those of the given config, whose weights the state dict
    holds."""
    if path is None:
        return config.tisa if isinstance(config, TisaConfigMixin) else None
    return PreTrainedConfig.get_config_dict(path, **hub_kwargs)[0].get("tisa")


def _is_kernel_key(key: str) -> bool:
    return f"{BIAS_ATTRIBUTE}." in f".{key}" and key.rsplit(".", 1)[-1] in KERNEL_PARAMETERS


def tisa_model_class(model_class: type[PreTrainedModel]) -> type[PreTrainedModel]:
    """The TISA class of an architecture's model class (itself if it is one)."""
    if issubclass(model_class, TisaModelMixin):
        return model_class
    return _build_tisa_model_class(model_class)


@functools.cache
def _build_tisa_model_class(model_class: type[PreTrainedModel]) -> type[PreTrainedModel]:
    name = TISA_CLASS_PREFIX + model_class.__name__
    namespace = {
        "config_class": tisa_config_class(model_class.config_class),
        "__module__": __name__,
        "__qualname__": name,
    }
    # A class that generates names GenerationMixin among its own bases, as transformers 5 asks of generative classes.
    generation = (GenerationMixin,) if issubclass(model_class, GenerationMixin) else ()
    return publish_class(globals(), type(name, (TisaModelMixin, model_class, *generation), namespace))


def __getattr__(name: str) -> type[PreTrainedModel]:
    """TISA model classes by name (`TisaBertForSequenceClassification`), built on first use: pickle imports this
    module (and so tisa_hf, which registers TISA) and finds the class here in a process that has not built it yet
    (see `model_configs.transformers_base_class`)."""
    return tisa_model_class(transformers_base_class(name, PreTrainedModel))


@functools.cache
def register_model_classes(adapter: EncoderAdapter) -> None:
    """Registers the TISA class of every Auto mapping the architecture appears in (once per adapter), and the
    architecture's renaming of checkpoint weights (NomicBERT's and GTE's, whose Hub checkpoints keep their original
    layout), which transformers looks up by model type."""
    config_class = tisa_config_class(adapter.config_class)
    conversions = get_checkpoint_conversion_mapping(adapter.model_type)
    if conversions is not None:
        register_checkpoint_conversion_mapping(config_class.model_type, conversions, overwrite=True)
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
    register_config_type(adapter)
    register_model_classes(adapter)
