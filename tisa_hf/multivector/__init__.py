"""Long documents as a product: TISA models as sentence-transformers `MultiVectorEncoder`s (one vector a token,
scored by MaxSim, the `late:` read-out of the retrieval commands).

The functions are imported on first use (PEP 562), so that the commands' `--help`, which reads this package's
`options` module, answers without importing torch or sentence-transformers.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # the lazy exports below, for type checkers and the API reference
    from .encoder import save_multi_vector_encoder as save_multi_vector_encoder

_EXPORTS = {"save_multi_vector_encoder": "tisa_hf.multivector.encoder"}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(_EXPORTS[name]), name)
