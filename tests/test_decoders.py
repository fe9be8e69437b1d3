"""TISA decoders (`is_decoder=True`: `TisaBertLMHeadModel`, `TisaRobertaForCausalLM`) against the causal reference:
every backend and `tisa_sdpa` route masks causally, a step on a KV cache takes its queries' own rows of the bias, and
cross-attention runs without a bias."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from transformers import AutoModelForCausalLM, GenerationMixin, StaticCache
from transformers.modeling_outputs import CausalLMOutputWithCrossAttentions

from tests.fixtures import tiny_config
from tests.reference import reference_forward
from tisa_hf.errors import UsageError

pytestmark = pytest.mark.core

DECODER_TYPES = ("bert", "roberta")
# The KV cache's name in a call and its output: `cache` from transformers 5.24, `past_key_values` before.
CACHE = (
    "cache" if "cache" in {f.name for f in dataclasses.fields(CausalLMOutputWithCrossAttentions)} else "past_key_values"
)
BACKENDS = ("eager", "sdpa")
MODES = ("add", "replace")


def decoder(model_type, mode="add", attn="sdpa", **overrides):
    torch.manual_seed(0)
    tisa = {"num_kernels": 3, "mode": mode, "init": "random"}
    config = tiny_config(model_type, is_decoder=True, tisa=tisa, **overrides)
    return AutoModelForCausalLM.from_config(config, attn_implementation=attn).eval()


def token_ids(config, batch=3, length=10):
    generator = torch.Generator().manual_seed(1)
    return torch.randint(3, config.vocab_size, (batch, length), generator=generator)


def right_padded(input_ids, pad_token_id):
    mask = torch.ones_like(input_ids)
    mask[1, 7:] = 0
    mask[2, 4:] = 0
    return input_ids.masked_fill(mask == 0, pad_token_id), mask


def hidden_states(model, input_ids, mask=None, **kwargs):
    output = model(input_ids=input_ids, attention_mask=mask, output_hidden_states=True, use_cache=False, **kwargs)
    return output.hidden_states[-1]


@pytest.mark.parametrize("attn", BACKENDS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("model_type", DECODER_TYPES)
def test_decoder_matches_the_causal_reference(model_type, mode, attn):
    """Without padding transformers hands `sdpa` no mask (SDPA's `is_causal` would do), so TISA masks causally
    itself; with padding, the causal padding mask carries the bias."""
    model = decoder(model_type, mode, attn)
    input_ids = token_ids(model.config)
    padded, mask = right_padded(input_ids, model.config.pad_token_id)
    with torch.no_grad():
        unpadded = hidden_states(model, input_ids)
        got = hidden_states(model, padded, mask)
    full_mask = torch.ones_like(input_ids, dtype=torch.bool)
    torch.testing.assert_close(
        unpadded, reference_forward(model_type, model.base_model, input_ids, full_mask, mode), atol=1e-5, rtol=1e-4
    )
    keep = mask.bool()
    expected = reference_forward(model_type, model.base_model, padded, keep, mode)
    torch.testing.assert_close(got[keep], expected[keep], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("attn", BACKENDS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("model_type", DECODER_TYPES)
def test_cached_steps_equal_the_full_pass(model_type, mode, attn):
    """A step of 3 tokens and a step of 1 on a KV cache give the full pass's logits at their positions, and
    `generate()` gives the same tokens with the cache as without."""
    model = decoder(model_type, mode, attn)
    input_ids = token_ids(model.config)
    with torch.no_grad():
        full = model(input_ids, use_cache=False).logits
        for prefix in (7, 9):
            cache = getattr(model(input_ids[:, :prefix], use_cache=True), CACHE)
            step = model(input_ids[:, prefix:], **{CACHE: cache}, use_cache=True).logits
            torch.testing.assert_close(step, full[:, prefix:], atol=1e-5, rtol=1e-4)
        prompt = input_ids[:, :4]
        cached = model.generate(prompt, max_new_tokens=8, do_sample=False)
        uncached = model.generate(prompt, max_new_tokens=8, do_sample=False, use_cache=False)
    assert torch.equal(cached, uncached)


def test_every_sdpa_route_is_causal():
    """The trainable-bias route (training on the CPU) and the long-input routes (a kernel cache too small for the
    bias; the banded route leaves decoders to the blockwise one) give the reference too."""
    model = decoder("bert")
    input_ids = token_ids(model.config)
    full_mask = torch.ones_like(input_ids, dtype=torch.bool)
    expected = reference_forward("bert", model.base_model, input_ids, full_mask)
    model.train()  # no dropout in the tiny configs: training only changes the route
    torch.testing.assert_close(hidden_states(model, input_ids), expected, atol=1e-5, rtol=1e-4)
    model.eval()
    model.base_model.tisa.cache_limit_bytes = 0
    with torch.no_grad():
        torch.testing.assert_close(hidden_states(model, input_ids), expected, atol=1e-5, rtol=1e-4)
        padded, mask = right_padded(input_ids, model.config.pad_token_id)
        got = hidden_states(model, padded, mask)
    keep = mask.bool()
    torch.testing.assert_close(
        got[keep], reference_forward("bert", model.base_model, padded, keep)[keep], atol=1e-5, rtol=1e-4
    )


def test_trainable_bias_route_gives_the_eager_kernel_gradients():
    gradients = {}
    for attn in BACKENDS:
        model = decoder("bert", attn=attn).train()
        input_ids = token_ids(model.config)
        model(input_ids, use_cache=False).logits.square().mean().backward()
        gradients[attn] = model.base_model.tisa.amplitude.grad
    torch.testing.assert_close(gradients["sdpa"], gradients["eager"], atol=1e-6, rtol=1e-4)


def test_flex_attention_is_refused_for_decoders_before_any_work():
    """transformers' causal block mask for flex attention does not mask a BERT decoder causally on the CPU (a plain
    `BertLMHeadModel` gives NaN there), so a TISA decoder names the backends that do."""
    with pytest.raises(ValueError, match="^A TISA decoder .* runs with attn_implementation='sdpa' or 'eager'"):
        decoder("bert", attn="flex_attention")
    model = decoder("bert")
    with pytest.raises(ValueError, match="^A TISA decoder"):
        model.set_attn_implementation("flex_attention")
    assert model.config._attn_implementation == "sdpa"


@pytest.mark.parametrize("attn", BACKENDS)
@pytest.mark.parametrize("model_type", DECODER_TYPES)
def test_cross_attention_runs_transformers_plain_function(model_type, attn):
    """Cross-attention relates the decoder's tokens to the encoder's, which share no positions: no bias."""
    model = decoder(model_type, attn=attn, add_cross_attention=True)
    input_ids = token_ids(model.config)
    generator = torch.Generator().manual_seed(2)
    encoder_states = torch.randn(3, 6, model.config.hidden_size, generator=generator)
    encoder_mask = torch.ones(3, 6, dtype=torch.long)
    encoder_mask[1, 4:] = 0
    with torch.no_grad():
        got = hidden_states(model, input_ids, encoder_hidden_states=encoder_states, encoder_attention_mask=encoder_mask)
    full_mask = torch.ones_like(input_ids, dtype=torch.bool)
    expected = reference_forward(
        model_type, model.base_model, input_ids, full_mask, "add", encoder_states, encoder_mask.bool()
    )
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


def test_a_fixed_size_cache_is_refused_in_one_line():
    """A static cache's keys are its whole size, not the tokens seen, so the query's positions cannot be read from
    them."""
    model = decoder("bert")
    input_ids = token_ids(model.config)
    cache = StaticCache(config=model.config, max_cache_len=16)
    with pytest.raises(ValueError, match=r"^TISA decoders read .*DynamicCache; this StaticCache .*default cache"):
        model(input_ids, **{CACHE: cache}, use_cache=True)


def test_add_mode_decoder_stops_at_the_position_table_with_the_fix():
    """A cached step past the position table gets the same one-line error as a long input (`replace` reads on)."""
    model = decoder("bert", max_position_embeddings=12)
    input_ids = token_ids(model.config, batch=1)
    with torch.no_grad():
        cache = getattr(model(input_ids, use_cache=True), CACHE)
        with pytest.raises(ValueError, match="^The input has 13 tokens but the position table holds 12.*'replace'"):
            model(input_ids[:, :3], **{CACHE: cache}, use_cache=True)
        replace = decoder("bert", "replace", max_position_embeddings=12)
        cache = getattr(replace(input_ids, use_cache=True), CACHE)
        assert replace(input_ids[:, :3], **{CACHE: cache}, use_cache=True).logits.isfinite().all()


def test_length_scaling_is_refused_for_decoders():
    """`length_scale_from` reads a sequence's length from its first query row, which a causal mask cuts to one key."""
    model = decoder("bert")
    model.config.tisa = dataclasses.replace(model.config.tisa, length_scale_from=4)
    input_ids = token_ids(model.config)
    with torch.no_grad(), pytest.raises(UsageError, match="^TisaConfig.length_scale_from .* for a decoder"):
        model(input_ids, use_cache=False)


@pytest.mark.parametrize("model_type", DECODER_TYPES)
def test_generative_classes_name_generation_mixin_among_their_bases(model_type):
    """transformers 5 asks a class that generates to name GenerationMixin itself (`test_inherits_generation_mixin`)."""
    model_class = type(decoder(model_type))
    assert GenerationMixin in model_class.__bases__
    assert model_class.can_generate()
