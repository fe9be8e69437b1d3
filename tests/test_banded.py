"""The banded route of `tisa_sdpa` (`banded/sdpa.py`'s `banded_biased_sdpa`): a layer whose f(k) is exactly 0 outside a
band of offsets, against softmax(q kᵀ · scale + F + mask) v built explicitly, with and without padding; and a whole
model on it against the blockwise route and the reference written from the equations. On the CPU and, where there
is one, a CUDA GPU (PyTorch's memory-efficient kernel there)."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import AutoModel

import tisa_hf.attention as attention
from tests.fixtures import RecordingRoute, requires_extra, tiny_config
from tests.reference import reference_forward
from tisa_hf.attention.banded import log_sum_exp
from tisa_hf.attention.banded import padded as banded_padded
from tisa_hf.attention.banded import sdpa as banded
from tisa_hf.kernels import TisaPositionBias, nonzero_band

pytestmark = pytest.mark.core

HEADS, LENGTH, HEAD_DIM = 3, 50, 8
DEVICES = ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)]


def dense_reference(query, key, value, mask, values):
    """softmax(q kᵀ / sqrt(d) + F + mask) v in float64, F[h, i, j] = values[h, j - i + n - 1]."""
    query, key, value, values = (t.double().cpu() for t in (query, key, value, values))
    mask = mask.cpu() if mask is not None else None
    length = query.shape[2]
    offsets = torch.arange(length)[None, :] - torch.arange(length)[:, None]
    scores = query @ key.transpose(-1, -2) / math.sqrt(query.shape[-1]) + values[:, offsets + length - 1]
    if mask is not None:
        scores = scores.masked_fill(~mask, -math.inf) if mask.dtype == torch.bool else scores + mask.double()
    return scores.softmax(-1) @ value


def band_values(low: int, high: int, amplitude: float = 2.0, seed: int = 0) -> torch.Tensor:
    """(HEADS, 2n-1) offset table, random at offsets low .. high and exactly 0 elsewhere; head 1 all zeros."""
    generator = torch.Generator().manual_seed(seed)
    offsets = torch.arange(1 - LENGTH, LENGTH)
    inside = (offsets >= low) & (offsets <= high)
    values = torch.where(inside, amplitude * torch.randn(HEADS, 2 * LENGTH - 1, generator=generator), 0.0)
    values[1] = 0
    return values


def inputs(batch: int = 3, device: str = "cpu"):
    generator = torch.Generator().manual_seed(1)
    # Keys and values laid out as transformers hands them over: a (B, n, H, d) projection seen as (B, H, n, d).
    return [
        torch.randn(batch, LENGTH, HEADS, HEAD_DIM, generator=generator).to(device).transpose(1, 2) for _ in range(3)
    ]


def padding_masks(batch: int = 3) -> dict[str, torch.Tensor | None]:
    """No mask, and a padded batch's (B, 1, n, n) masks as transformers builds them for sdpa (boolean) and as an
    additive float mask."""
    keep = torch.ones(batch, LENGTH, dtype=torch.bool)
    keep[1, 37:] = False
    keep[2:, 9:] = False
    boolean = keep[:, None, None, :].expand(batch, 1, LENGTH, LENGTH).contiguous()
    additive = torch.zeros(boolean.shape).masked_fill(~boolean, torch.finfo(torch.float32).min)
    return {"none": None, "bool": boolean, "float": additive}


@pytest.fixture(autouse=True)
def small_blocks(monkeypatch):
    """Blocks of a few rows and edge masks of a few kilobytes, so that 50 tokens exercise interior blocks, several
    edge blocks and the correction's query blocks."""
    monkeypatch.setattr(banded, "BANDED_BLOCK_ROWS", 4)
    monkeypatch.setattr(banded, "BANDED_ACCELERATOR_BLOCK_ROWS", 4)
    monkeypatch.setattr(banded, "BANDED_EDGE_MASK_BYTES", HEADS * 4 * 60)
    monkeypatch.setattr(banded_padded, "BANDED_CORRECTION_ROWS", 7)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mask_kind", ["none", "bool", "float"])
@pytest.mark.parametrize(
    ("low", "high"),
    [(-3, 5), (-12, 0), (0, 2), (4, 9), (-9, -2), (-49, -40), (30, 49), (-49, 49)],
    ids=["around 0", "left", "right from 0", "right only", "left only", "left edge", "right edge", "everything"],
)
def test_banded_route_matches_the_dense_computation(device, mask_kind, low, high):
    query, key, value = inputs(device=device)
    mask = on(padding_masks()[mask_kind], device)
    values = band_values(low, high).to(device)
    got = banded.banded_biased_sdpa(query, key, value, mask, values, None)
    expected = dense_reference(query, key, value, mask, values)
    torch.testing.assert_close(got.double().cpu(), expected, atol=1e-5, rtol=1e-5)


def on(mask: torch.Tensor | None, device: str) -> torch.Tensor | None:
    return mask.to(device) if mask is not None else None


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("mask_kind", ["none", "bool"])
@pytest.mark.parametrize("amplitude", [60.0, 170.0, -30.0], ids=["large", "beyond expm1's float32 range", "negative"])
def test_large_biases_neither_overflow_nor_lose_precision(device, mask_kind, amplitude):
    """f up to 170 (an adapted MiniLM head reaches 168: expm1 overflows float32 beyond 88) and strongly negative (on
    sequences of 37 and 50 keys, where the band holds too little of a row's attention for the padded-batch
    correction to decline)."""
    query, key, value = inputs(batch=2, device=device)
    mask = on(padding_masks(batch=2)[mask_kind], device)
    values = (band_values(-4, 4, amplitude=1.0).abs() * amplitude).to(device)
    got = banded.banded_biased_sdpa(query, key, value, mask, values, None)
    assert got is not None
    expected = dense_reference(query, key, value, mask, values)
    torch.testing.assert_close(got.double().cpu(), expected, atol=2e-5, rtol=1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_kernels_that_are_zero_everywhere_give_plain_attention(device):
    query, key, value = inputs(device=device)
    zeros = torch.zeros(HEADS, 2 * LENGTH - 1, device=device)
    for mask in padding_masks().values():
        mask = on(mask, device)
        got = banded.banded_biased_sdpa(query, key, value, mask, zeros, None)
        expected = torch.nn.functional.scaled_dot_product_attention(query, key, value, attn_mask=mask)
        torch.testing.assert_close(got, expected, atol=1e-6, rtol=1e-6)


def test_padding_that_cancels_most_of_the_plain_attention_gives_way_to_the_blockwise_route():
    """The padded-batch correction computes (o + C) / (1 + D): where the bias takes away nearly all of a row's plain
    attention (1 + D tiny), it declines (None); without padding the three-part split has nothing to cancel."""
    query = torch.randn(1, HEADS, LENGTH, HEAD_DIM) * 4
    values = torch.where(torch.arange(1 - LENGTH, LENGTH).abs() <= 1, -12.0, 0.0).expand(HEADS, -1)
    mask = torch.ones(1, 1, LENGTH, LENGTH, dtype=torch.bool)
    assert banded.banded_biased_sdpa(query, query, query, mask, values, None) is None
    got = banded.banded_biased_sdpa(query, query, query, None, values, None)
    torch.testing.assert_close(got.double(), dense_reference(query, query, query, None, values), atol=1e-5, rtol=1e-5)


def test_nonzero_band_is_exact():
    values = torch.zeros(2, 2 * LENGTH - 1)
    assert nonzero_band(values) is None
    values[0, LENGTH - 1 - 7] = 1e-30  # offset -7
    values[1, LENGTH - 1 + 3] = -2.0  # offset 3
    assert nonzero_band(values) == (-7, 3)


# --- the route, in a model ---------------------------------------------------------------------------------------

MODEL_LENGTH = 200


def narrow_model(far_field: str = "none", width: float = 1.0, implementation: str = "sdpa"):
    """A random 3-layer TISA BERT in replace mode whose Gaussians sit within ±8 of offset 0 (f exactly 0 beyond
    ±19 in float32: a band narrower than a quarter of `MODEL_LENGTH`), each `width` times wider; biases never
    cached."""
    config = tiny_config("bert", tisa={"num_kernels": 3, "mode": "replace", "init": "random", "far_field": far_field})
    model = AutoModel.from_config(config, attn_implementation=implementation).eval()
    with torch.no_grad():
        generator = torch.Generator().manual_seed(2)
        model.tisa.center.uniform_(-8, 8, generator=generator)
        model.tisa.sharpness.uniform_(1.0, 2.0, generator=generator).div_(width**2)
        if model.tisa.far_field_slope is not None:
            model.tisa.far_field_slope.fill_(0.5)
    model.tisa.cache_limit_bytes = 0
    return model


def batch(length: int = MODEL_LENGTH, padded: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    input_ids = torch.randint(1, 99, (3, length), generator=generator)
    mask = torch.ones(3, length, dtype=torch.long)
    if padded:
        mask[1, 120:] = 0
        mask[2, 31:] = 0
    return input_ids, mask


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("padded", [False, True], ids=["equal lengths", "padded"])
def test_a_model_on_the_banded_route_matches_the_blockwise_route_and_the_reference(monkeypatch, device, padded):
    model = narrow_model().to(device)
    recorder = RecordingRoute().install(monkeypatch)
    input_ids, mask = batch(padded=padded)
    inputs = {"input_ids": input_ids.to(device), "attention_mask": mask.to(device)}
    without_banded = {attention.SDPA_POLICY_KWARG: attention.DEFAULT_SDPA_POLICY.without(attention.BANDED)}
    with torch.no_grad():
        banded = model(**inputs).last_hidden_state.cpu()
        blockwise = model(**inputs, **without_banded).last_hidden_state.cpu()
    assert recorder.taken == [attention.BANDED] * 3 + [attention.BLOCKWISE] * 3
    keep = mask.bool()
    # max abs difference observed on the CPU: 7.2e-7 (equal lengths) and 4.8e-7 (padded)
    torch.testing.assert_close(banded[keep], blockwise[keep], atol=1e-5, rtol=1e-5)
    expected = reference_forward("bert", model.cpu(), input_ids, keep, "replace")
    torch.testing.assert_close(banded[keep], expected[keep], atol=1e-5, rtol=1e-4)


def test_a_mask_cuda_cannot_read_in_place_is_copied_into_aligned_rows():
    """CUDA's memory-efficient kernel reads mask rows from 16-element boundaries: a window 2 floats into rows of 23
    is copied into rows of 32, one that starts on such a boundary is passed as it is."""
    table = torch.randn(1, HEADS, 5, 23)
    window = table[:, :, :, 2:21]
    aligned = log_sum_exp.cuda_aligned_mask(window)
    assert torch.equal(aligned, window)
    assert aligned.stride()[1:] == (5 * 32, 32, 1)
    assert aligned.data_ptr() % (log_sum_exp.CUDA_MASK_ALIGNMENT * 4) == 0
    rows_of_32 = torch.randn(1, HEADS, 5, 32)[..., :19]
    assert log_sum_exp.cuda_aligned_mask(rows_of_32) is rows_of_32


def routes_taken(monkeypatch, model, grad: bool = False, autocast: bool = False) -> set[attention.SdpaRoute]:
    recorder = RecordingRoute().install(monkeypatch)
    input_ids, mask = batch(padded=False)
    with torch.set_grad_enabled(grad), torch.autocast("cpu", dtype=torch.bfloat16, enabled=autocast):
        model(input_ids=input_ids, attention_mask=mask)
    monkeypatch.undo()
    return set(recorder.taken)


def test_route_choice(monkeypatch):
    """Narrow kernels take the banded route in inference; a far-field term (never 0), a band wider than a quarter
    of the input, gradients and bf16 autocast keep the route they took before it existed."""
    assert routes_taken(monkeypatch, narrow_model()) == {attention.BANDED}
    assert routes_taken(monkeypatch, narrow_model(far_field="log")) == {attention.BLOCKWISE}
    assert routes_taken(monkeypatch, narrow_model(width=4.0)) == {attention.BLOCKWISE}
    assert routes_taken(monkeypatch, narrow_model(), autocast=True) == {attention.BLOCKWISE}
    frozen = narrow_model()
    frozen.requires_grad_(False)
    assert routes_taken(monkeypatch, frozen, grad=True) == {attention.BLOCKWISE}
    training = narrow_model().train()
    assert routes_taken(monkeypatch, training, grad=True) == {attention.TRAINABLE_BIAS}


def test_the_band_is_read_from_each_layer_at_the_call_length():
    """A layer's band decides its own route: exactly 0 beyond a quarter of the length here, not there."""
    kernels = TisaPositionBias(2, HEADS, 1)
    with torch.no_grad():
        kernels.amplitude.fill_(1.0)
        kernels.sharpness[0].fill_(1.0)  # exp(-k²): exactly 0 in float32 beyond |k| = 10
        kernels.sharpness[1].fill_(1e-4)  # exp(-k² / 10^4): nonzero up to |k| of about 1,000
    query = torch.zeros(1, HEADS, 200, HEAD_DIM)
    kernels.cache_limit_bytes = 0
    with torch.no_grad():
        chosen = [attention.sdpa_route(kernels, query, query, 0.0, {}, layer) for layer in (0, 1)]
        assert attention.sdpa_route(kernels, query, query, 0.0, {}) is attention.BLOCKWISE  # no layer
    assert chosen == [attention.BANDED, attention.BLOCKWISE]


@requires_extra("analysis")
def test_the_benchmark_times_one_model_on_both_routes(monkeypatch):
    """`tisa-hf bench --sections long`: the banded and blockwise variants are the same TISA model, whose step sets
    the route switch for its own forward only."""
    from tisa_hf.performance import bench

    args = bench.parse_args(["--device", "cpu", "--sections", "long", "--output", "/dev/null"])
    cases = bench.long_cases(args, 8192)
    assert [case.label() for case in cases.values()] == [
        f"long sdpa 1x8192 float32 {variant}" for variant in ("plain", "banded", "blockwise", "chunk")
    ]
    seen = []
    for case in cases.values():
        bench.step_function(case, lambda **batch: seen.append(batch.get(attention.SDPA_POLICY_KWARG)))()
    assert seen == [None, None, attention.DEFAULT_SDPA_POLICY.without(attention.BANDED), None]
    assert cases["chunk"].chunked and not cases["chunk"].tisa
