"""Registry of supported encoder architectures. A new one is an `EncoderAdapter` subclass and one
`register_adapter` call."""

from __future__ import annotations

from transformers import PreTrainedModel

from .albert import AlbertAdapter
from .base import LAYER_INDEX_KWARG, AttentionSite, EncoderAdapter
from .bert import BertAdapter
from .roberta import RobertaAdapter

ADAPTERS: dict[str, EncoderAdapter] = {}


def register_adapter(adapter: EncoderAdapter) -> None:
    ADAPTERS[adapter.model_type] = adapter


def supported_model_types() -> list[str]:
    return sorted(ADAPTERS)


def adapter_for(model_type: str) -> EncoderAdapter:
    """The adapter of `model_type`, or a ValueError naming it and the supported ones."""
    try:
        return ADAPTERS[model_type]
    except KeyError:
        raise ValueError(
            f"TISA does not support model type {model_type!r}; supported: {', '.join(supported_model_types())}. "
            "A new encoder needs an EncoderAdapter registered with tisa_hf.adapters.register_adapter."
        ) from None


def find_base_model(model: PreTrainedModel) -> tuple[PreTrainedModel, EncoderAdapter]:
    """The encoder inside any head model, with its adapter."""
    adapter = adapter_for(model.config.model_type)
    base = model if isinstance(model, adapter.base_model_class) else getattr(model, "base_model", None)
    if not isinstance(base, adapter.base_model_class):
        raise ValueError(
            f"Could not find a {adapter.base_model_class.__name__} inside {type(model).__name__}; "
            "TISA patches models whose base model is the architecture's encoder."
        )
    return base, adapter


for _adapter in (AlbertAdapter(), BertAdapter(), RobertaAdapter()):
    register_adapter(_adapter)

__all__ = [
    "ADAPTERS",
    "LAYER_INDEX_KWARG",
    "AttentionSite",
    "EncoderAdapter",
    "adapter_for",
    "find_base_model",
    "register_adapter",
    "supported_model_types",
]
