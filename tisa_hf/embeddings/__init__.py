"""Sentence embeddings of long documents: TISA models as sentence-transformers models, and `tisa-hf longembed`.

The sentence-transformers functions are imported on first use (PEP 562), so that `tisa-hf longembed --help`,
which reads this package's `options` module, answers without importing torch or sentence-transformers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the lazy exports below, for type checkers and the API reference
    from ..common.sentence_models import save_sentence_transformer as save_sentence_transformer
    from ..common.sentence_models import to_tisa_sentence_transformer as to_tisa_sentence_transformer
    from ..common.sentence_models import write_sentence_transformer as write_sentence_transformer

_EXPORTS = {
    "to_tisa_sentence_transformer": "tisa_hf.common.sentence_models",
    "save_sentence_transformer": "tisa_hf.common.sentence_models",
    "write_sentence_transformer": "tisa_hf.common.sentence_models",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
