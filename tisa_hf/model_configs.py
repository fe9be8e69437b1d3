"""The transformers config classes of the TISA model types: an architecture's config class plus `tisa`, saved as
`model_type: tisa_hf_<type>` (`TisaBertConfig` for `tisa_hf_bert`, ...). `TisaConfig` (in `config`) is the TISA
settings themselves; a TISA model's config holds them, and is their one home: the encoder reads them from it.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any, ClassVar

import transformers
from transformers import PreTrainedConfig

from .adapters import EncoderAdapter, adapter_for
from .config import TisaConfig
from .names import plain_implementation, tisa_implementation, tisa_model_type

# config.json names TISA's attention function, which transformers knows only once tisa_hf is imported: a plain class
# (`BertForSequenceClassification.from_pretrained`) then refuses the checkpoint before reading its weights, instead
# of running it without its kernels. The TISA config classes read past it (`from_dict`): the model type already says
# the model is TISA's, and which backend runs it stays the caller's choice, as for any model.
ATTENTION_KEY = "attn_implementation"
ATTENTION_MARK = tisa_implementation("sdpa")
TISA_CLASS_PREFIX = "Tisa"  # TisaBertConfig, TisaBertForSequenceClassification: transformers' class name after it


class TisaConfigMixin:
    """The config of a TISA model: its architecture's config plus `tisa`, stored in config.json as a dict."""

    # Makes the model classes of a TISA type known to the AutoModel* classes, which look them up by the config's
    # class right after building a config. Set by `integration.install` (the model classes build on these config
    # classes, so this module cannot import them); registering then, not at import, imports an architecture's model
    # code only once a config of its TISA type exists.
    register_model_classes: ClassVar[Callable[[EncoderAdapter], None]]

    @property
    def tisa(self) -> TisaConfig | None:
        return self.__dict__.get("tisa")

    @tisa.setter
    def tisa(self, value: TisaConfig | dict | bool | None) -> None:
        self.__dict__["tisa"] = None if value is None else TisaConfig.from_value(value)

    def to_dict(self) -> dict[str, Any]:
        """transformers' dict of the config, with `tisa` as the dict config.json stores and TISA's attention named."""
        output = super().to_dict()
        if output.get("tisa") is not None:
            output["tisa"] = output["tisa"].to_dict()
        return {**output, ATTENTION_KEY: ATTENTION_MARK}

    @classmethod
    def from_dict(cls, config_dict: dict[str, Any], **kwargs) -> PreTrainedConfig:
        """transformers' `from_dict`, past the attention name that config.json holds for the plain classes."""
        return super().from_dict({key: value for key, value in config_dict.items() if key != ATTENTION_KEY}, **kwargs)

    @property
    def _attn_implementation(self) -> str | None:
        return self._attn_implementation_internal

    @_attn_implementation.setter
    def _attn_implementation(self, value: str | dict | None) -> None:
        """A TISA config names the backend as transformers does (`sdpa`, also for `tisa_sdpa`): code that branches on
        the name (`== "sdpa"`) reads a TISA model as the backend it runs. Its attention sites read TISA's function
        for the name (`attention.sites.SiteConfig`)."""
        self._attn_implementation_internal = plain_implementation(value) if isinstance(value, str) else value

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
        TisaConfigMixin.register_model_classes(adapter_for(self.model_type))

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
    name = TISA_CLASS_PREFIX + config_class.__name__
    namespace = {"model_type": tisa_model_type(config_class.model_type), "__module__": __name__, "__qualname__": name}
    return publish_class(globals(), type(name, (TisaConfigMixin, config_class), namespace))


def publish_class(module_globals: dict[str, Any], tisa_class: type) -> type:
    """Makes a TISA class an attribute of its module under its name, where pickle looks a class up (a model sent
    to another process, `torch.save`). A name already taken (a class of the same name outside transformers) is
    kept: pickle then refuses the newcomer by name instead of loading the other."""
    module_globals.setdefault(tisa_class.__qualname__, tisa_class)
    return tisa_class


def transformers_base_class(name: str, kind: type) -> type:
    """The transformers class a TISA class name is built on (`TisaBertConfig` -> `BertConfig`), of `kind`, for the
    module `__getattr__` through which a process that has not built a TISA class yet (a worker unpickling a model)
    finds it. An AttributeError for any other name, saying what is missing where the name is TISA's."""
    base_name = name.removeprefix(TISA_CLASS_PREFIX)
    base = getattr(transformers, base_name, None) if base_name != name else None
    if not (isinstance(base, type) and issubclass(base, kind)):
        if base_name == name or name.startswith("__"):
            raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
        raise AttributeError(
            f"{name} is not a TISA class that tisa_hf can build: transformers has no {kind.__name__} named "
            f"{base_name!r}. Build it in this process before unpickling (tisa_hf.patch a {base_name})."
        )
    try:
        adapter_for(base.model_type if issubclass(base, PreTrainedConfig) else base.config_class.model_type)
    except ValueError as error:
        raise AttributeError(f"{name} cannot be built: {error} Register it before unpickling.") from None
    return base


def __getattr__(name: str) -> type[PreTrainedConfig]:
    """TISA config classes by name (`TisaBertConfig`), built on first use (see `transformers_base_class`)."""
    return tisa_config_class(transformers_base_class(name, PreTrainedConfig))


def _architecture_settings(config: PreTrainedConfig) -> dict[str, Any]:
    """A config's settings without its model type and TISA settings: what both kinds of config share."""
    return {key: value for key, value in config.to_dict().items() if key not in ("model_type", "tisa", ATTENTION_KEY)}


def tisa_model_config(config: PreTrainedConfig, tisa: TisaConfig | dict | bool | None = True) -> PreTrainedConfig:
    """A new TISA config with `config`'s settings and `tisa` (`AutoModel*.from_config` builds a TISA model from it);
    `config` itself is left untouched."""
    adapter = adapter_for(config.model_type)
    new = tisa_config_class(adapter.config_class).from_dict(_architecture_settings(config))
    new.tisa = tisa
    new._attn_implementation = config._attn_implementation
    return new


def plain_model_config(config: PreTrainedConfig) -> PreTrainedConfig:
    """The architecture's own config with `config`'s settings and no TISA (for the unpatched counterpart)."""
    return adapter_for(config.model_type).config_class.from_dict(_architecture_settings(config))


def register_config_type(adapter: EncoderAdapter) -> None:
    """Registers the architecture's TISA config type with `AutoConfig` (idempotent)."""
    from transformers import AutoConfig

    config_class = tisa_config_class(adapter.config_class)
    AutoConfig.register(config_class.model_type, config_class, exist_ok=True)
