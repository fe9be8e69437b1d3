"""TISA attention against a plain-PyTorch reference, across architectures, modes and attention backends."""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import AutoModel

import tisa_hf
from tests.fixtures import enable_activation_checkpointing, tiny_config
from tests.reference import reference_forward

pytestmark = pytest.mark.core


def make_inputs(config, batch=3, length=9):
    low = 3 if config.model_type in ("roberta", "xlm-roberta") else 1
    input_ids = torch.randint(low, config.vocab_size, (batch, length))
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[1, 6:] = 0
    mask[2, 4:] = 0
    input_ids[mask == 0] = config.pad_token_id
    return input_ids, mask


@pytest.mark.parametrize("attn", ["eager", "sdpa", "flex_attention"])
@pytest.mark.parametrize("mode", ["add", "replace"])
def test_patched_encoder_matches_reference(model_type, attn, mode):
    config = tiny_config(model_type, tisa={"num_kernels": 3, "mode": mode, "init": "random"})
    model = AutoModel.from_config(config, attn_implementation=attn).eval()
    input_ids, mask = make_inputs(config)
    expected = reference_forward(model_type, model, input_ids, mask.bool(), mode)
    with torch.no_grad():
        got = model(input_ids=input_ids, attention_mask=mask).last_hidden_state
    keep = mask.bool()
    torch.testing.assert_close(got[keep], expected[keep], atol=1e-5, rtol=1e-4)


def test_bias_changes_the_output(model_type):
    """Guards the reference test: a model whose kernels are zero differs from one whose kernels are not."""
    config = tiny_config(model_type, tisa={"num_kernels": 3, "init": "random"})
    model = AutoModel.from_config(config).eval()
    input_ids, mask = make_inputs(config)
    with torch.no_grad():
        before = model(input_ids=input_ids, attention_mask=mask).last_hidden_state
        with tisa_hf.tisa_disabled(model):
            after = model(input_ids=input_ids, attention_mask=mask).last_hidden_state
    assert (before - after).abs().max() > 20 * 1e-5  # well above the reference tolerance


def test_eager_and_sdpa_agree_and_attentions_include_tisa(model_type):
    config = tiny_config(model_type, tisa={"num_kernels": 2, "init": "random"})
    eager = AutoModel.from_config(config, attn_implementation="eager").eval()
    sdpa = AutoModel.from_config(copy.deepcopy(config), attn_implementation="sdpa").eval()
    sdpa.load_state_dict(eager.state_dict())
    input_ids, mask = make_inputs(config)
    with torch.no_grad():
        out_eager = eager(input_ids=input_ids, attention_mask=mask, output_attentions=True)
        out_sdpa = sdpa(input_ids=input_ids, attention_mask=mask)
    keep = mask.bool()
    torch.testing.assert_close(
        out_eager.last_hidden_state[keep], out_sdpa.last_hidden_state[keep], atol=1e-5, rtol=1e-4
    )
    # The first layer's probabilities are softmax(QK^T/sqrt(d) + F) on the embedding output.
    probabilities = out_eager.attentions[0]
    assert probabilities.shape == (3, config.num_attention_heads, 9, 9)
    torch.testing.assert_close(probabilities.sum(-1), torch.ones(3, config.num_attention_heads, 9))
    assert probabilities[1, :, :, 6:].abs().max() == 0
    with torch.no_grad(), tisa_hf.tisa_disabled(eager):
        plain = eager(input_ids=input_ids, attention_mask=mask, output_attentions=True).attentions[0]
    assert (plain - probabilities).abs().max() > 1e-4


def test_bias_is_toeplitz_and_distinct_per_layer_in_albert():
    config = tiny_config("albert", num_hidden_layers=4, tisa={"num_kernels": 3, "init": "random"})
    model = AutoModel.from_config(config).eval()
    assert model.tisa.amplitude.shape == (4, 4, 3)
    biases = [model.tisa(layer, 12, torch.float32)[0] for layer in range(4)]
    for bias in biases:
        for offset in range(-11, 12):
            diagonal = torch.diagonal(bias, offset=offset, dim1=-2, dim2=-1)
            torch.testing.assert_close(diagonal, diagonal[:, :1].expand_as(diagonal))
    for first in range(4):
        for second in range(first + 1, 4):
            assert not torch.allclose(biases[first], biases[second])


def test_albert_layers_use_their_own_functions():
    """Changing the kernels of layer 2 only changes ALBERT's output through layer 2's attention."""
    config = tiny_config("albert", num_hidden_layers=3, tisa={"num_kernels": 2, "init": "random"})
    model = AutoModel.from_config(config).eval()
    input_ids, mask = make_inputs(config)
    expected = reference_forward("albert", model, input_ids, mask.bool())
    with torch.no_grad():
        model.tisa.amplitude[2] += 1.0
        changed = reference_forward("albert", model, input_ids, mask.bool())
        got = model(input_ids=input_ids, attention_mask=mask).last_hidden_state
    keep = mask.bool()
    torch.testing.assert_close(got[keep], changed[keep], atol=1e-5, rtol=1e-4)
    assert not torch.allclose(expected[keep], changed[keep], atol=1e-4)


def test_share_across_layers_gives_one_set_per_head():
    config = tiny_config("albert", tisa={"num_kernels": 5, "init": "random", "share_across_layers": True})
    model = AutoModel.from_config(config).eval()
    assert model.tisa.amplitude.shape == (1, 4, 5)
    torch.testing.assert_close(model.tisa(0, 6, torch.float32), model.tisa(2, 6, torch.float32))
    input_ids, mask = make_inputs(config)
    with torch.no_grad():
        got = model(input_ids=input_ids, attention_mask=mask).last_hidden_state
    expected = reference_forward("albert", model, input_ids, mask.bool())
    torch.testing.assert_close(got[mask.bool()], expected[mask.bool()], atol=1e-5, rtol=1e-4)


def test_gradients_reach_every_kernel_parameter(model_type):
    config = tiny_config(model_type, tisa={"num_kernels": 3, "init": "random"})
    model = AutoModel.from_config(config).train()
    input_ids, mask = make_inputs(config)
    model(input_ids=input_ids, attention_mask=mask).last_hidden_state.square().mean().backward()
    for name in ("amplitude", "sharpness", "center"):
        grad = getattr(model.tisa, name).grad
        assert grad is not None and grad.abs().sum() > 0, name


def test_gradient_checkpointing_gives_the_same_gradients():
    config = tiny_config("bert", tisa={"num_kernels": 3, "init": "random"})
    model = AutoModel.from_config(config).train()
    input_ids, mask = make_inputs(config)

    def kernel_grad():
        model.zero_grad()
        model(input_ids=input_ids, attention_mask=mask).last_hidden_state.square().mean().backward()
        return model.tisa.amplitude.grad.clone()

    plain = kernel_grad()
    enable_activation_checkpointing(model)
    torch.testing.assert_close(kernel_grad(), plain)


def test_autocast_bfloat16_runs_with_bias_in_query_dtype():
    config = tiny_config("bert", tisa={"num_kernels": 3, "init": "random"})
    model = AutoModel.from_config(config, attn_implementation="sdpa").eval()
    input_ids, mask = make_inputs(config)
    with torch.no_grad():
        full = model(input_ids=input_ids, attention_mask=mask).last_hidden_state
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = model(input_ids=input_ids, attention_mask=mask).last_hidden_state
    keep = mask.bool()
    torch.testing.assert_close(low.float()[keep], full[keep], atol=0.1, rtol=0.05)


def test_flash_attention_is_refused_with_a_fix():
    config = tiny_config("bert", tisa={"num_kernels": 1, "init": "zeros"})
    with pytest.raises(ValueError, match="attn_implementation='flash_attention_2' cannot take.*'sdpa'"):
        AutoModel.from_config(config, attn_implementation="flash_attention_2")
    model = AutoModel.from_config(config)
    with pytest.raises(ValueError, match="attn_implementation='flash_attention_2' cannot take"):
        model.set_attn_implementation("flash_attention_2")
