"""Packed rows (padding-free batches): several sequences in one row, their position ids restarting at each one, as
transformers' `DataCollatorWithFlattening` makes them. TISA's offset between two tokens is then the difference of their
position ids; which tokens see each other stays the stock model's business (stock BERT and RoBERTa let a packed
row's sequences see each other, all of them as encoders and the earlier ones as decoders, unless the attention mask
separates them), so each check runs the stock model beside TISA."""

from __future__ import annotations

from unittest.mock import patch

import pytest
import torch
from transformers import AutoModel, AutoModelForCausalLM

from tests.fixtures import tiny_config
from tests.test_decoders import CACHE
from tisa_hf.attention import policy
from tisa_hf.attention.logits import packed_bias, packed_positions
from tisa_hf.attention.route import SdpaCall

pytestmark = pytest.mark.core

MODEL_TYPES = ("bert", "roberta")
MODES = (None, "add", "replace")  # None: the stock model
BACKENDS = ("eager", "sdpa")
LENGTHS = (5, 7, 4)


def model(model_type, mode, attn, decoder=False, **overrides):
    tisa = None if mode is None else {"num_kernels": 3, "mode": mode, "init": "random"}
    config = tiny_config(model_type, tisa=tisa, is_decoder=decoder, **overrides)
    torch.manual_seed(0)
    model_class = AutoModelForCausalLM if decoder else AutoModel
    return model_class.from_config(config, attn_implementation=attn).eval()


class Batch:
    """`LENGTHS` sequences, right-padded in a batch and packed in one row, with the position ids of each (RoBERTa's
    start after its padding row, as its embeddings number them)."""

    def __init__(self, model_type, config, lengths=LENGTHS):
        first = config.pad_token_id + 1 if model_type == "roberta" else 0
        width = max(lengths)
        generator = torch.Generator().manual_seed(1)
        self.mask = (torch.arange(width)[None, :] < torch.tensor(lengths)[:, None]).long()
        ids = torch.randint(3, config.vocab_size, (len(lengths), width), generator=generator)
        self.padded = ids.masked_fill(self.mask == 0, config.pad_token_id)
        self.padded_positions = (torch.arange(width) + first).expand(len(lengths), -1)
        self.packed = self.padded[self.mask.bool()][None]
        self.packed_positions = torch.cat([torch.arange(length) + first for length in lengths])[None]
        sequence = torch.cat([torch.full((length,), index) for index, length in enumerate(lengths)])
        self.same_sequence = sequence[:, None] == sequence[None, :]

    def separating_mask(self, causal: bool, dtype=torch.float32) -> torch.Tensor:
        """A (1, 1, n, n) additive mask that keeps each packed sequence to itself (and causal, for a decoder)."""
        allowed = self.same_sequence
        if causal:
            allowed = allowed & torch.ones_like(allowed).tril()
        return torch.zeros(allowed.shape, dtype=dtype).masked_fill(~allowed, torch.finfo(dtype).min)[None, None]


def states(model, **inputs):
    with torch.no_grad():
        return model(**inputs, output_hidden_states=True).hidden_states[-1]


def padded_states(model, batch):
    out = states(model, input_ids=batch.padded, attention_mask=batch.mask, position_ids=batch.padded_positions)
    return out[batch.mask.bool()]


def test_the_bias_inside_each_packed_sequence_is_its_padded_rows_bias_exactly():
    kernels = model("bert", "add", "sdpa").base_model.tisa
    batch = Batch("bert", tiny_config("bert"))
    bias = packed_bias(kernels, 1, batch.packed_positions, torch.float32)[0]
    padded = kernels.rows(1, max(LENGTHS), max(LENGTHS), torch.float32)[0]
    start = 0
    for length in LENGTHS:
        inside = bias[:, start : start + length, start : start + length]
        assert torch.equal(inside, padded[:, :length, :length])
        start += length
    # For ids that count up by one, the gathered bias is the Toeplitz bias itself, bit for bit.
    arange = torch.arange(9)[None]
    assert torch.equal(packed_bias(kernels, 0, arange, torch.float32), kernels(0, 9, torch.float32))


def test_only_ids_that_restart_within_a_row_count_as_packed():
    assert packed_positions(None) is None
    assert packed_positions(torch.arange(6)[None] + 4) is None
    assert packed_positions(torch.stack([torch.arange(6), torch.arange(6) + 2])) is None
    restarting = torch.tensor([[0, 1, 2, 0, 1]])
    assert packed_positions(restarting) is restarting


@pytest.mark.parametrize("attn", BACKENDS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_a_separated_packed_encoder_row_equals_the_padded_batch(model_type, mode, attn):
    """Kept apart by the mask, each packed sequence reads what its padded row reads, stock and TISA alike."""
    encoder = model(model_type, mode, attn)
    batch = Batch(model_type, encoder.config)
    mask = batch.separating_mask(causal=False)
    packed = states(encoder, input_ids=batch.packed, position_ids=batch.packed_positions, attention_mask=mask)[0]
    torch.testing.assert_close(packed, padded_states(encoder, batch), atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("attn", BACKENDS)
@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_an_unseparated_packed_encoder_row_lets_its_sequences_see_each_other_as_stock_does(model_type, attn):
    """Without a separating mask, stock BERT and RoBERTa let every packed sequence see the others, so no sequence
    reads what its padded row reads; TISA leaves that as it is, in both modes."""
    for mode in MODES:
        encoder = model(model_type, mode, attn)
        batch = Batch(model_type, encoder.config)
        packed = states(encoder, input_ids=batch.packed, position_ids=batch.packed_positions)[0]
        start = 0
        for length in LENGTHS:
            gap = packed[start : start + length] - padded_states(encoder, batch)[start : start + length]
            assert gap.abs().max() > 1e-4, (mode, start)
            start += length


@pytest.mark.parametrize("attn", BACKENDS)
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_a_packed_decoder_row_equals_the_padded_batch_where_stock_does(model_type, mode, attn):
    """A decoder's causal mask keeps the first packed sequence to itself: it reads what its padded row reads; with a
    separating causal mask every sequence does. Stock and TISA alike, without a cache."""
    decoder = model(model_type, mode, attn, decoder=True)
    batch = Batch(model_type, decoder.config)
    inputs = {"input_ids": batch.packed, "position_ids": batch.packed_positions, "use_cache": False}
    padded = padded_states(decoder, batch)
    unseparated = states(decoder, **inputs)[0]
    torch.testing.assert_close(unseparated[: LENGTHS[0]], padded[: LENGTHS[0]], atol=2e-6, rtol=1e-5)
    assert (unseparated[LENGTHS[0] :] - padded[LENGTHS[0] :]).abs().max() > 1e-4
    separated = states(decoder, **inputs, attention_mask=batch.separating_mask(causal=True))[0]
    torch.testing.assert_close(separated, padded, atol=2e-6, rtol=1e-5)


@pytest.mark.parametrize("mode", ("add", "replace"))
def test_ids_that_count_up_by_one_keep_the_output_of_a_call_without_ids_bit_for_bit(mode):
    for attn in BACKENDS:
        encoder = model("bert", mode, attn)
        batch = Batch("bert", encoder.config)
        plain = states(encoder, input_ids=batch.padded, attention_mask=batch.mask)
        with_ids = states(
            encoder, input_ids=batch.padded, attention_mask=batch.mask, position_ids=batch.padded_positions
        )
        assert torch.equal(plain, with_ids)


def test_add_mode_takes_a_packed_row_longer_than_the_table_and_refuses_ids_outside_it():
    encoder = model("bert", "add", "sdpa", max_position_embeddings=8)
    batch = Batch("bert", encoder.config, lengths=(8, 8, 6))
    assert batch.packed.shape[1] > 8
    assert states(encoder, input_ids=batch.packed, position_ids=batch.packed_positions).shape[1] == 22
    with pytest.raises(ValueError) as raised:
        states(encoder, input_ids=batch.packed[:, :9], position_ids=torch.arange(9)[None])
    assert str(raised.value) == (
        "The position ids reach 8 but the position table has rows 0 to 7, and TISA mode='add' keeps the position "
        "embeddings. Keep the ids inside the table, or use TisaConfig(mode='replace'), which accepts any position."
    )


def test_a_packed_long_inference_call_leaves_the_routes_that_read_the_offset_table_by_place():
    encoder = model("bert", "add", "sdpa")
    query = torch.zeros(1, encoder.config.num_attention_heads, 6, 8)
    positions = torch.tensor([[0, 1, 2, 0, 1, 2]])
    call = SdpaCall(query, query, query, None, 0.0, None, encoder.tisa, 0, positions=positions)
    reason = "a row of packed sequences takes its bias per row, at its position ids' offsets"
    with torch.no_grad(), patch.object(type(encoder.tisa), "cache_limit_bytes", 0):  # past the cache: long inference
        assert policy.FUSED_SDPA_POLICY.choose(call) is policy.STORED_BIAS
        assert dict(policy.passed_over(policy.FUSED_SDPA_POLICY, call))[policy.BANDED] == reason
        assert policy.BLOCKWISE.refusal(call) == reason
        unpacked = SdpaCall(query, query, query, None, 0.0, None, encoder.tisa, 0)
        assert policy.BLOCKWISE.refusal(unpacked) is None


def test_flex_attention_refuses_a_packed_row_in_one_line():
    encoder = model("bert", "add", "flex_attention")
    batch = Batch("bert", encoder.config)
    with pytest.raises(ValueError, match="^tisa_flex_attention reads TISA's bias at the offsets of token places"):
        states(encoder, input_ids=batch.packed, position_ids=batch.packed_positions)


def test_a_multi_token_cached_step_with_restarting_ids_is_refused_in_one_line():
    decoder = model("bert", "add", "sdpa", decoder=True)
    batch = Batch("bert", decoder.config)
    with torch.no_grad():
        cache = getattr(decoder(input_ids=batch.packed[:, :5], use_cache=True), CACHE)
        step = {"input_ids": batch.packed[:, 5:9], "position_ids": torch.tensor([[5, 6, 0, 1]]), CACHE: cache}
        with pytest.raises(
            ValueError, match=r"^TISA reads the offsets of a step on a KV cache .* \(use_cache=False\)\.$"
        ):
            decoder(**step)
