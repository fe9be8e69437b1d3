"""Chi et al.'s attention-output variance: the hand-built attention matches the model's, and its slopes."""

import pytest
import torch
from transformers import AlbertModel, BertModel

from tests.fixtures import tiny_config
from tisa_hf.adapters import find_base_model
from tisa_hf.analysis.variance import (
    attention_output_variance,
    first_layer_attention_output,
    log_log_slope,
    position_free_inputs,
)

SIZES = dict(vocab_size=300, num_hidden_layers=2, intermediate_size=64, max_position_embeddings=128)


def tiny(kind: str, **extra):
    torch.manual_seed(0)
    if kind == "albert":
        return AlbertModel(tiny_config("albert", **SIZES, **extra)).eval()
    return BertModel(tiny_config("bert", **SIZES, **extra)).eval()


@pytest.mark.parametrize("kind", ["bert", "albert"])
def test_bidirectional_output_matches_the_models_own_attention(kind):
    model = tiny(kind)
    base, adapter = find_base_model(model)
    module = adapter.attention_sites(base)[0].module
    input_ids = torch.randint(300, (2, 10), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        hidden = position_free_inputs(model, input_ids)
        reference = module(hidden)[0]
        mine = first_layer_attention_output(model, hidden, causal=False)
        if kind == "albert":  # ALBERT's attention module also applies its output projection and LayerNorm
            mine = module.LayerNorm(module.dense(mine) + hidden)
    assert torch.allclose(mine, reference, atol=1e-5)


def test_position_free_inputs_ignore_position():
    model = tiny("bert")
    input_ids = torch.full((1, 6), 7)
    with torch.no_grad():
        hidden = position_free_inputs(model, input_ids)
    assert torch.allclose(hidden[0, 0], hidden[0, 5])


def test_causal_variance_falls_like_one_over_position():
    model = tiny("bert", initializer_range=0.002)
    profile = attention_output_variance(model, length=64, batch_size=32)
    assert profile.causal_slope == pytest.approx(-1, abs=0.15)
    assert profile.bidirectional_slope == pytest.approx(0, abs=0.1)
    assert profile.causal[0] > 10 * profile.causal[-1]
    assert profile.positions.tolist() == list(range(1, 65))


def test_log_log_slope_of_a_power_law():
    positions = torch.arange(1, 50)
    assert log_log_slope(positions, 3.0 * positions.double() ** -0.5) == pytest.approx(-0.5)
