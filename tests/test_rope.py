"""TISA on the RoPE encoders (ModernBERT, NomicBERT, GTE, EuroBERT), on tiny random checkpoints saved to a folder and
loaded through the real `from_pretrained` (`rope_checkpoint`): `add` with zero kernels is the stock model, `replace`
removes the rotation and reads past the rotary range, the rotary profile, and ModernBERT's sliding window on every
route."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModel, AutoModelForMaskedLM, ModernBertModel

import tisa_hf
import tisa_hf.attention as attention
from tests.fixtures import (
    ROPE_MODEL_TYPES,
    ROPE_RANGE,
    RecordingRoute,
    modernbert_config_with_layers,
    requires_extra,
    rope_params,
    tiny_config,
    tiny_rope_config,
)
from tisa_hf import TisaConfig
from tisa_hf.adapters import ADAPTERS, adapter_for
from tisa_hf.adapters.modernbert import ModernBertAdapter
from tisa_hf.adapters.positions import profile_text
from tisa_hf.adapters.rotary import GteAdapter
from tisa_hf.common.checkpoints import CheckpointFacts, check_sequence_length
from tisa_hf.errors import UsageError
from tisa_hf.kernels import TisaPositionBias

pytestmark = pytest.mark.core

FIT = {"fit_restarts": 1}


def padded_batch(length: int = 12) -> tuple[torch.Tensor, torch.Tensor]:
    input_ids = torch.randint(5, 99, (2, length), generator=torch.Generator().manual_seed(1))
    mask = torch.ones_like(input_ids)
    mask[1, length - 4 :] = 0
    return input_ids, mask


@pytest.mark.parametrize("implementation", ["eager", "sdpa"])
def test_add_with_zero_kernels_is_the_stock_model(rope_checkpoint, implementation):
    input_ids, mask = padded_batch()
    stock = AutoModelForMaskedLM.from_pretrained(rope_checkpoint, attn_implementation=implementation).eval()
    tisa = AutoModelForMaskedLM.from_pretrained(
        rope_checkpoint, tisa=TisaConfig(init="zeros"), attn_implementation=implementation
    ).eval()
    assert type(tisa).__name__ == "Tisa" + type(stock).__name__
    with torch.no_grad():
        assert torch.equal(tisa(input_ids, attention_mask=mask).logits, stock(input_ids, attention_mask=mask).logits)


def test_replace_reads_two_and_four_times_the_rotary_range(rope_checkpoint):
    model = AutoModel.from_pretrained(rope_checkpoint, tisa=TisaConfig(mode="replace", init="random")).eval()
    for length in (2 * ROPE_RANGE, 4 * ROPE_RANGE):
        input_ids = torch.randint(5, 99, (1, length))
        with torch.no_grad():
            assert torch.isfinite(model(input_ids).last_hidden_state).all()


def test_replace_without_kernels_reads_no_order(rope_checkpoint, rope_model_type):
    """With the rotation removed and f = 0 nothing positional is left: permuting the tokens permutes the outputs
    (ModernBERT's local layers keep their window, which is positional, so it is given global layers only)."""
    if rope_model_type == "modernbert":
        config = modernbert_config_with_layers(["full_attention"] * 3)
    else:
        config = tiny_rope_config(rope_model_type)
    stock = AutoModel.from_config(config).eval()
    model = AutoModel.from_config(config).eval()
    model.load_state_dict(stock.state_dict())
    tisa_hf.patch(model, TisaConfig(mode="replace", init="zeros"))
    input_ids = torch.randint(5, 99, (1, 10))
    order = torch.randperm(10)
    with torch.no_grad():
        out = model(input_ids).last_hidden_state
        permuted = model(input_ids[:, order]).last_hidden_state
        torch.testing.assert_close(permuted, out[:, order], rtol=1e-5, atol=1e-5)
        assert not torch.allclose(
            stock(input_ids[:, order]).last_hidden_state, stock(input_ids).last_hidden_state[:, order]
        )


def test_save_and_reload_give_identical_outputs(rope_checkpoint, tmp_path):
    input_ids, mask = padded_batch()
    model = AutoModelForMaskedLM.from_pretrained(rope_checkpoint, tisa=TisaConfig(mode="replace", init="random")).eval()
    model.save_pretrained(tmp_path)
    reloaded = AutoModelForMaskedLM.from_pretrained(tmp_path).eval()
    assert type(reloaded) is type(model)
    with torch.no_grad():
        assert torch.equal(
            reloaded(input_ids, attention_mask=mask).logits, model(input_ids, attention_mask=mask).logits
        )


@pytest.mark.parametrize("mode", ["add", "replace"])
def test_a_training_step_reaches_the_kernels(rope_checkpoint, mode):
    model = AutoModelForMaskedLM.from_pretrained(rope_checkpoint, tisa=TisaConfig(mode=mode, init="random")).train()
    input_ids, mask = padded_batch()
    model(input_ids, attention_mask=mask, labels=input_ids).loss.backward()
    kernels = model.base_model.tisa
    assert kernels.amplitude.grad is not None and kernels.amplitude.grad.abs().sum() > 0


def test_the_rotary_profile_is_the_logits_rotation_adds(rope_checkpoint):
    """Layer 0's profile against transformers' own eager attention: its log-probabilities with the rotation, less those
    of the same model in `replace` mode (no rotation, f = 0), are the rotary part of the logits up to each row's
    constant (the log-sum-exp), averaged over the same text."""
    length = 12
    stock = AutoModel.from_pretrained(rope_checkpoint, attn_implementation="eager").eval()
    unrotated = AutoModel.from_pretrained(
        rope_checkpoint, attn_implementation="eager", tisa=TisaConfig(mode="replace", init="zeros")
    ).eval()
    profiles = tisa_hf.extract_positional_profiles(stock, length=length)
    text = profile_text(stock.config.vocab_size, length)
    with torch.no_grad():
        rotated = stock(text, output_attentions=True).attentions[0].log()
        plain = unrotated(text, output_attentions=True).attentions[0].log()
    difference = (rotated - plain).mean(0)
    centred = profiles.logits[0] - profiles.logits[0].mean(-1, keepdim=True)
    torch.testing.assert_close(centred, difference - difference.mean(-1, keepdim=True), rtol=1e-4, atol=1e-4)
    assert profiles.logits.shape == (3, 4, length, length)


@pytest.mark.parametrize(
    "rope_model_type",
    rope_params(fast=("modernbert", "nomic_bert")),
)
def test_the_fitted_replace_kernels_follow_the_rotary_profile(rope_checkpoint):
    """`init="fit"` in `replace` fits f to the rotary profile it removes: within the fit's window, f(k) is the
    profile's diagonal means up to the constant the fit adds (which softmax ignores), to 10% of their variance."""
    model = AutoModel.from_pretrained(rope_checkpoint, tisa=TisaConfig(mode="replace", fit_window=8, **FIT))
    target = tisa_hf.extract_positional_profiles(model).toeplitz.profile.float()
    length = (target.shape[-1] + 1) // 2
    with torch.no_grad():
        fitted = torch.stack([model.tisa.offset_table(layer, length, torch.float32) for layer in range(3)])
    fitted, target = (values[..., length - 9 : length + 8] for values in (fitted, target))
    fitted, target = (values - values.mean(-1, keepdim=True) for values in (fitted, target))
    assert (fitted - target).square().mean() < 0.1 * target.square().mean()


def test_a_user_text_profile_and_its_errors(rope_checkpoint):
    model = AutoModel.from_pretrained(rope_checkpoint)
    text = torch.randint(5, 99, (2, 10))
    assert tisa_hf.extract_positional_profiles(model, input_ids=text).length == 10
    table_model = AutoModel.from_config(tiny_config("bert"))
    with pytest.raises(ValueError, match="A position table's profiles read the mean word at every position, not text"):
        tisa_hf.extract_positional_profiles(table_model, input_ids=text)


def test_rotary_encoders_have_no_positional_parameters(rope_checkpoint):
    model = AutoModel.from_pretrained(rope_checkpoint, tisa=TisaConfig(num_kernels=2, init="zeros"))
    count = tisa_hf.count_positional_parameters(model)
    assert count.position_embeddings == 0 and count.tisa == 3 * 2 * 4 * 3


def test_an_architecture_the_installed_transformers_lacks_is_refused_naming_the_release(monkeypatch):
    monkeypatch.setattr(ModernBertAdapter, "available", False)
    with pytest.raises(ValueError) as error:
        adapter_for("modernbert")
    assert str(error.value).startswith(
        "TISA on model type 'modernbert' needs transformers 4.48.0 or later, which has the architecture; transformers "
    )
    assert "modernbert" not in tisa_hf.supported_model_types()
    assert "modernbert" in ADAPTERS


def test_the_tests_of_an_architecture_the_installed_transformers_lacks_skip_naming_the_release(monkeypatch):
    monkeypatch.setattr(GteAdapter, "available", False)
    params = dict(zip(ROPE_MODEL_TYPES, rope_params(fast=("gte", "modernbert")), strict=True))
    (skip,) = params["gte"].marks
    assert skip.name == "skip" and skip.kwargs["reason"].startswith(
        "TISA on model type 'gte' needs transformers 5.18.0 or later, which has the architecture; transformers "
    )
    assert not params["modernbert"].marks and params["eurobert"].marks[0].name == "slow"


# ModernBERT's sliding window on every route: a 1-layer local model, whose output at position 0 cannot depend on a
# token outside its window (8 tokens: positions 0 .. 3 for query 0), and does on one inside it.
WINDOW_ROUTES = {
    "eager": ("eager", None, None, False),
    "sdpa stored bias": ("sdpa", attention.DEFAULT_SDPA_POLICY, attention.STORED_BIAS, False),
    "sdpa trainable bias": ("sdpa", attention.DEFAULT_SDPA_POLICY, attention.TRAINABLE_BIAS, True),
    "sdpa blockwise": ("sdpa", attention.DEFAULT_SDPA_POLICY, attention.BLOCKWISE, False),
    "sdpa banded": ("sdpa", attention.DEFAULT_SDPA_POLICY, attention.BANDED, False),
    "fused (interpreted)": ("sdpa", attention.FUSED_SDPA_POLICY, attention.FUSED, False),
    "flex attention": ("flex_attention", None, None, False),
}
SLOW_ROUTES = ("fused (interpreted)", "flex attention")  # Triton's interpreter; flex attention compiles on the CPU


@pytest.mark.parametrize(
    "route", [pytest.param(route, marks=[pytest.mark.slow] if route in SLOW_ROUTES else []) for route in WINDOW_ROUTES]
)
def test_the_sliding_window_hides_keys_outside_it_on_every_route(monkeypatch, route):
    implementation, policy, expected, training = WINDOW_ROUTES[route]
    if route == "fused (interpreted)":
        pytest.importorskip("triton")
    config = modernbert_config_with_layers(["sliding_attention"])
    model = ModernBertModel(config)
    tisa_hf.patch(model, TisaConfig(num_kernels=2, init="random"))
    model.set_attn_implementation(implementation)
    if route == "sdpa banded":  # narrow kernels near offset 0: f is exactly 0 past a few offsets
        with torch.no_grad():
            model.tisa.sharpness.fill_(4.0)
            model.tisa.center.uniform_(-1, 1)
    long = route in ("sdpa blockwise", "sdpa banded")
    if long:
        monkeypatch.setattr(TisaPositionBias, "cache_limit_bytes", 0)
    recorder = RecordingRoute().install(monkeypatch)
    # transformers' flex mask lets a sequence shorter than one of its blocks (128) see past the window, in the stock
    # model too: the flex case reads two blocks.
    length = 136 if route == "flex attention" else 64 if long else 24
    input_ids = torch.randint(5, 99, (1, length), generator=torch.Generator().manual_seed(2))
    outside, inside = input_ids.clone(), input_ids.clone()
    outside[0, 12] = 5 if input_ids[0, 12] != 5 else 6
    inside[0, 3] = 5 if input_ids[0, 3] != 5 else 6
    model.train(training)
    policy_kwargs = {} if policy is None else {attention.SDPA_POLICY_KWARG: policy}
    with torch.set_grad_enabled(training):
        outputs = [model(ids, **policy_kwargs).last_hidden_state[0, 0] for ids in (input_ids, outside, inside)]
    if expected is not None:
        assert set(recorder.taken) == {expected}
    assert torch.equal(outputs[0], outputs[1])
    assert not torch.allclose(outputs[0], outputs[2])


@requires_extra("analysis")
def test_analyze_and_compare_refuse_a_rope_encoder_in_one_line(rope_checkpoint, tmp_path, capsys):
    from tisa_hf.commands.cli import main

    for command in (["analyze", rope_checkpoint, "--out", str(tmp_path / "r")], ["compare", rope_checkpoint]):
        assert main(command) == 2
        error = capsys.readouterr().err.strip()
        assert len(error.splitlines()) == 1 and "Traceback" not in error
        assert f"{rope_checkpoint!r} cannot be analysed: rotary position embeddings have no position table" in error
        assert "tisa_hf.extract_positional_profiles(model, input_ids=...)" in error
    assert not (tmp_path / "r").exists()


def test_length_scaling_is_refused_on_sliding_window_layers(rope_checkpoints):
    model = AutoModel.from_pretrained(
        rope_checkpoints["modernbert"], tisa=TisaConfig(init="zeros", length_scale_from=8)
    ).eval()
    with pytest.raises(UsageError, match="in a sliding-window layer .ModernBERT's local layers. holds"):
        model(torch.randint(5, 99, (1, 12)))


def test_the_tools_read_a_rope_encoder_up_to_its_rotary_range_and_say_so(rope_checkpoint):
    """A command reads a plain or `add` RoPE encoder up to `max_position_embeddings`, the range it was trained on,
    and names that range in its refusal; `replace` reads any length."""
    facts = CheckpointFacts.read(rope_checkpoint)
    assert (facts.table_length, facts.positions.describes) == (ROPE_RANGE, "rotary range")
    check_sequence_length(facts.config, ROPE_RANGE, TisaConfig())
    check_sequence_length(facts.config, 4 * ROPE_RANGE, TisaConfig(mode="replace"))
    with pytest.raises(UsageError) as refusal:
        check_sequence_length(facts.config, ROPE_RANGE + 1, TisaConfig(), name="tiny")
    assert str(refusal.value) == (
        f"--max-seq-length {ROPE_RANGE + 1} exceeds the rotary range of tiny, {ROPE_RANGE} positions (TISA "
        f"mode='add' keeps it); use --tisa.mode replace, which reads any length, or --max-seq-length {ROPE_RANGE} "
        "or less."
    )
