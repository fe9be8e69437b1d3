"""Registry of supported encoder architectures. A new one is an `EncoderAdapter` subclass and one
`register_adapter` call."""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..names import LAYER_INDEX_KWARG, base_model_type, tisa_model_type
from .albert import AlbertAdapter
from .base import AttentionSite, EncoderAdapter
from .bert import BertAdapter
from .distilbert import DistilBertAdapter
from .electra import ElectraAdapter
from .modernbert import ModernBertAdapter
from .positions import PositionScheme, PositionTable, RotaryPositions
from .roberta import RobertaAdapter
from .rotary import EuroBertAdapter, GteAdapter, NomicBertAdapter, RotaryAdapter
from .xlm_roberta import XLMRobertaAdapter

if TYPE_CHECKING:
    from transformers import PreTrainedModel

ADAPTERS: dict[str, EncoderAdapter] = {}
BUILTIN_ADAPTERS = (
    AlbertAdapter(),
    BertAdapter(),
    DistilBertAdapter(),
    ElectraAdapter(),
    RobertaAdapter(),
    XLMRobertaAdapter(),
    ModernBertAdapter(),
    NomicBertAdapter(),
    GteAdapter(),
    EuroBertAdapter(),
)


for _adapter in BUILTIN_ADAPTERS:
    ADAPTERS[_adapter.model_type] = _adapter


def supported_model_types() -> list[str]:
    """The model types TISA patches with the installed transformers."""
    return sorted(model_type for model_type, adapter in ADAPTERS.items() if adapter.available)


def adapter_for(model_type: str) -> EncoderAdapter:
    """The adapter of `model_type` (a base type such as `bert`, or its TISA type `tisa_hf_bert`), or a
    ValueError naming it and the supported ones."""
    adapter = ADAPTERS.get(base_model_type(model_type))
    if adapter is None:
        raise ValueError(
            f"TISA does not support model type {model_type!r}; supported: {', '.join(supported_model_types())}. "
            "A new encoder needs an EncoderAdapter registered with tisa_hf.register_adapter."
        )
    if not adapter.available:
        raise ValueError(adapter.unavailable_reason())
    return adapter


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


__all__ = [
    "ADAPTERS",
    "LAYER_INDEX_KWARG",
    "AttentionSite",
    "EncoderAdapter",
    "PositionScheme",
    "PositionTable",
    "RotaryAdapter",
    "RotaryPositions",
    "adapter_for",
    "find_base_model",
    "BUILTIN_ADAPTERS",
    "base_model_type",
    "tisa_model_type",
    "supported_model_types",
]
