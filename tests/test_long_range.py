"""The two long-range settings of `TisaConfig`: the far-field term of f and the length-aware logit scale, against
the plain-PyTorch reference, saved and loaded, and their defaults bit for bit the model without them."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import AutoModel

import tisa_hf
from tests.fixtures import requires_extra, tiny_config
from tests.reference import reference_forward
from tisa_hf.kernels import TisaPositionBias

pytestmark = pytest.mark.core


def make_inputs(config, batch=3, length=30):
    low = 3 if config.model_type in ("roberta", "xlm-roberta") else 1
    generator = torch.Generator().manual_seed(0)
    input_ids = torch.randint(low, config.vocab_size, (batch, length), generator=generator)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[1, 20:] = 0
    mask[2, 9:] = 0
    input_ids[mask == 0] = config.pad_token_id
    return input_ids, mask


def with_slopes(model, seed=1):
    """Far-field slopes away from their starting 0, so that the term shows."""
    with torch.no_grad():
        slope = model.base_model.tisa.far_field_slope
        slope.copy_(torch.rand(slope.shape, generator=torch.Generator().manual_seed(seed)) + 0.5)
    return model


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
@pytest.mark.parametrize("mode", ["add", "replace"])
def test_far_field_term_matches_the_reference(model_type, attn, mode):
    config = tiny_config(model_type, tisa={"num_kernels": 2, "mode": mode, "init": "random", "far_field": "log"})
    model = with_slopes(AutoModel.from_config(config, attn_implementation=attn).eval())
    input_ids, mask = make_inputs(config)
    expected = reference_forward(model_type, model, input_ids, mask.bool(), mode)
    with torch.no_grad():
        got = model(input_ids=input_ids, attention_mask=mask).last_hidden_state
    keep = mask.bool()
    torch.testing.assert_close(got[keep], expected[keep], atol=1e-5, rtol=1e-4)


def test_far_field_values_are_minus_slope_times_log_distance():
    bias = TisaPositionBias(num_layers=2, num_heads=3, num_kernels=0, far_field="log")
    with torch.no_grad():
        bias.far_field_slope.copy_(torch.tensor([[0.5, 1.0, 2.0], [0.0, -1.0, 3.0]]))
    offsets = torch.tensor([-1000.0, -1.0, 0.0, 1.0, 7.0])
    expected = -bias.far_field_slope.detach()[..., None] * torch.tensor([math.log(1 + abs(k)) for k in offsets])
    torch.testing.assert_close(bias.scoring_function(offsets), expected)
    assert bias.scoring_function(offsets, layer=1).shape == (3, 5)


def test_far_field_starts_at_zero_so_a_fitted_model_is_unchanged_and_its_slopes_learn():
    plain = tiny_config("bert", tisa={"num_kernels": 2, "mode": "replace", "init": "random"})
    far = tiny_config("bert", tisa={"num_kernels": 2, "mode": "replace", "init": "random", "far_field": "log"})
    torch.manual_seed(0)
    without = AutoModel.from_config(plain).eval()
    torch.manual_seed(0)
    with_term = AutoModel.from_config(far).eval()
    assert torch.equal(with_term.tisa.far_field_slope, torch.zeros(3, 4))
    with_term.load_state_dict(without.state_dict(), strict=False)
    input_ids, mask = make_inputs(plain)
    with torch.no_grad():
        expected = without(input_ids=input_ids, attention_mask=mask).last_hidden_state
    got = with_term(input_ids=input_ids, attention_mask=mask).last_hidden_state
    assert torch.equal(got.detach(), expected)
    got.square().sum().backward()
    assert with_term.tisa.far_field_slope.grad.abs().min() > 0


def test_far_field_alone_needs_no_kernels_and_counts_its_parameters():
    config = tiny_config("bert", tisa={"num_kernels": 0, "mode": "replace", "far_field": "log"})
    model = with_slopes(AutoModel.from_config(config).eval())
    assert tisa_hf.TisaConfig(num_kernels=0, far_field="log").num_parameters(3, 4) == 12
    assert tisa_hf.TisaConfig(num_kernels=2, far_field="log").num_parameters(3, 4) == 84
    input_ids, mask = make_inputs(config)
    expected = reference_forward("bert", model, input_ids, mask.bool(), "replace")
    with torch.no_grad():
        got = model(input_ids=input_ids, attention_mask=mask).last_hidden_state
    torch.testing.assert_close(got[mask.bool()], expected[mask.bool()], atol=1e-5, rtol=1e-4)


def test_far_field_slopes_save_and_load_with_identical_outputs(tmp_path):
    config = tiny_config("bert", tisa={"num_kernels": 2, "mode": "replace", "init": "random", "far_field": "log"})
    model = with_slopes(AutoModel.from_config(config).eval())
    model.save_pretrained(tmp_path)
    again = AutoModel.from_pretrained(tmp_path).eval()
    assert again.config.tisa.far_field == "log"
    assert torch.equal(again.tisa.far_field_slope, model.tisa.far_field_slope)
    input_ids, mask = make_inputs(config)
    with torch.no_grad():
        assert torch.equal(
            again(input_ids=input_ids, attention_mask=mask).last_hidden_state,
            model(input_ids=input_ids, attention_mask=mask).last_hidden_state,
        )


def test_a_checkpoint_missing_its_far_field_slopes_is_refused(tmp_path):
    from safetensors.torch import load_file, save_file

    config = tiny_config("bert", tisa={"num_kernels": 2, "init": "random", "far_field": "log"})
    AutoModel.from_config(config).save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    save_file({k: v for k, v in weights.items() if "far_field" not in k}, tmp_path / "model.safetensors")
    with pytest.raises(ValueError, match=r"its weights lack tisa\.far_field_slope\. Pass tisa_reinitialize=True"):
        AutoModel.from_pretrained(tmp_path)


@pytest.mark.parametrize("attn", ["eager", "sdpa"])
def test_length_scale_matches_the_reference_per_sequence(model_type, attn):
    """Past L = 12 tokens, each sequence's logits are scaled by log n / log 12 of its own unpadded length n (30, 20
    and 9 tokens here: the last is not scaled)."""
    tisa = {"num_kernels": 2, "mode": "replace", "init": "random", "length_scale_from": 12}
    config = tiny_config(model_type, tisa=tisa)
    model = AutoModel.from_config(config, attn_implementation=attn).eval()
    input_ids, mask = make_inputs(config)
    expected = reference_forward(model_type, model, input_ids, mask.bool(), "replace")
    with torch.no_grad():
        got = model(input_ids=input_ids, attention_mask=mask).last_hidden_state
    keep = mask.bool()
    torch.testing.assert_close(got[keep], expected[keep], atol=1e-5, rtol=1e-4)


def test_length_scale_changes_only_inputs_longer_than_its_length():
    base = {"num_kernels": 2, "mode": "replace", "init": "random"}
    torch.manual_seed(0)
    plain = AutoModel.from_config(tiny_config("bert", tisa=base)).eval()
    scaled = AutoModel.from_config(tiny_config("bert", tisa={**base, "length_scale_from": 12})).eval()
    scaled.load_state_dict(plain.state_dict())
    input_ids = make_inputs(plain.config)[0][:1]
    with torch.no_grad():
        for length, same in ((12, True), (13, False)):
            pair = [m(input_ids=input_ids[:, :length]).last_hidden_state for m in (plain, scaled)]
            assert torch.equal(*pair) is same


def test_length_scale_in_a_padded_batch_equals_each_text_alone():
    tisa = {"num_kernels": 2, "mode": "replace", "init": "random", "length_scale_from": 12}
    model = AutoModel.from_config(tiny_config("bert", tisa=tisa)).eval()
    input_ids, mask = make_inputs(model.config)
    with torch.no_grad():
        batch = model(input_ids=input_ids, attention_mask=mask).last_hidden_state
        for row in range(3):
            length = int(mask[row].sum())
            alone = model(input_ids=input_ids[row : row + 1, :length]).last_hidden_state
            torch.testing.assert_close(batch[row, :length], alone[0], atol=1e-5, rtol=1e-4)


def test_length_scale_can_be_set_when_loading_a_checkpoint_but_kernel_settings_cannot(tmp_path):
    config = tiny_config("bert", tisa={"num_kernels": 2, "mode": "replace", "init": "random"})
    AutoModel.from_config(config).save_pretrained(tmp_path)
    saved = tisa_hf.TisaConfig(num_kernels=2, mode="replace", init="random")
    loaded = AutoModel.from_pretrained(tmp_path, tisa={**saved.to_dict(), "length_scale_from": 512})
    assert loaded.config.tisa.length_scale_from == 512
    with pytest.raises(ValueError, match="its kernels belong to those settings"):
        AutoModel.from_pretrained(tmp_path, tisa={**saved.to_dict(), "far_field": "log"})


def test_length_scale_and_far_field_are_checked():
    with pytest.raises(ValueError, match=r"TisaConfig.far_field must be one of none, log; got 'linear'\."):
        tisa_hf.TisaConfig(far_field="linear")
    with pytest.raises(ValueError, match=r"TisaConfig.length_scale_from must be an integer >= 2 or None, got 1\."):
        tisa_hf.TisaConfig(length_scale_from=1)


@requires_extra("finetune")
def test_report_rows_name_the_far_field_term():
    from tisa_hf.experiments.variants import variant_label

    assert (
        variant_label({"num_kernels": 5, "mode": "replace", "far_field": "log"}) == "TISA S=5, far field log (replace)"
    )
    assert (
        variant_label({"num_kernels": 0, "mode": "replace", "far_field": "log"}) == "TISA S=0, far field log (replace)"
    )
    assert variant_label({"num_kernels": 0, "mode": "replace"}) == "S=0 (bag of words)"
