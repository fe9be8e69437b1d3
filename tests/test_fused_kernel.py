"""The fused TISA attention kernels (Triton) against the eager computation of `reference.toeplitz_attention`: forward
output and log-sum-exp, dQ, dK, dV and d(table), padding, dropout, the operator under torch.compile and the route.

Without a GPU they run in Triton's interpreter, which `conftest.py` switches on (TRITON_INTERPRET=1) before anything
imports Triton; small tiles make short inputs span several. The kernels accumulate in fp32, so float64 gradcheck
does not apply: fp32 inputs are held to 2e-5 absolute against an fp32 reference on logits of order 1, fp16 and bf16
to their own rounding."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from unittest import mock

import pytest
import torch
from reference import toeplitz_attention
from transformers import AutoModel

pytest.importorskip("triton", reason="the fused TISA kernels need triton (pip install 'tisa-hf[test]')")

import tisa_hf.attention as attention  # noqa: E402
from tests.fixtures import tiny_config  # noqa: E402
from tisa_hf.attention.fused import limits  # noqa: E402

DEVICE = torch.device("cuda" if torch.cuda.is_available() else "cpu")
if DEVICE.type == "cpu" and not limits.TRITON_INTERPRETED:
    pytest.skip("the fused kernels run on CPU only under TRITON_INTERPRET=1", allow_module_level=True)

import triton  # noqa: E402
import triton.language as tl  # noqa: E402

from tisa_hf.attention.fused import backward as backward_launcher  # noqa: E402
from tisa_hf.attention.fused import forward as forward_launcher  # noqa: E402
from tisa_hf.attention.fused.backward import fused_backward  # noqa: E402
from tisa_hf.attention.fused.forward import fused_forward  # noqa: E402
from tisa_hf.attention.fused.tiles import dropout_keep  # noqa: E402

FP32 = {"atol": 2e-5, "rtol": 1e-5}


def inputs(batch, heads, length, head_dim, dtype=torch.float32, padded_from=None, seed=0):
    generator = torch.Generator().manual_seed(seed)
    query, key, value = (torch.randn(batch, heads, length, head_dim, generator=generator) for _ in range(3))
    table = torch.randn(heads, 2 * length - 1, generator=generator)
    mask = None
    if padded_from is not None:
        mask = torch.ones(batch, 1, 1, length, dtype=torch.bool)
        mask[-1, ..., padded_from:] = False
        mask = mask.expand(batch, heads, length, length)
    moved = [t.to(DEVICE, dtype) for t in (query, key, value, table)]
    return (*moved, None if mask is None else mask.to(DEVICE))


@triton.jit
def _keep_mask_kernel(SEED, KEEP, length, dropout_p, BLOCK: tl.constexpr):
    head_index = tl.program_id(1)
    rows = tl.program_id(0) * BLOCK + tl.arange(0, BLOCK)
    for start in range(0, length, BLOCK):
        cols = start + tl.arange(0, BLOCK)
        keep = dropout_keep(SEED, head_index, rows, cols, length, dropout_p)
        inside = (rows[:, None] < length) & (cols[None, :] < length)
        offsets = head_index.to(tl.int64) * length * length + rows[:, None] * length + cols[None, :]
        tl.store(KEEP + offsets, keep.to(tl.int8), mask=inside)


def keep_mask(seed: torch.Tensor, batch: int, heads: int, length: int, dropout: float) -> torch.Tensor:
    """The (batch, heads, n, n) keep mask a call with this seed draws (True: kept), from the kernels' own
    `dropout_keep`, for checking their dropout against an eager computation."""
    keep = torch.empty(batch, heads, length, length, dtype=torch.int8, device=seed.device)
    block = 16
    _keep_mask_kernel[(triton.cdiv(length, block), batch * heads)](seed, keep, length, dropout, block)
    return keep.bool()


@contextlib.contextmanager
def tile_sizes(tiles=None):
    """The launchers' tiles replaced by ((forward rows, keys), (backward rows, keys)) within the block (small tiles
    make short inputs span several); a backward tile holds no more rows than keys (the diagonal sums assume it)."""
    if tiles is None:
        yield
        return
    assert tiles[1][0] <= tiles[1][1], f"backward tiles of {tiles[1]}: rows must not exceed keys"
    with (
        mock.patch.object(forward_launcher, "forward_tiles", lambda head_dim: tiles[0]),
        mock.patch.object(backward_launcher, "backward_tiles", lambda head_dim: tiles[1]),
    ):
        yield


def kernel_and_reference(query, key, value, table, mask, dropout=0.0, seed=None, tiles=None):
    """The kernels' output, log-sum-exp and four gradients, and the reference's (in fp32, with the kernels' own keep
    mask where there is dropout)."""
    scale = query.shape[-1] ** -0.5
    with tile_sizes(tiles):
        output, lse = fused_forward(query, key, value, table, mask, seed, scale, dropout)
        grad = torch.randn(output.shape, generator=torch.Generator().manual_seed(5)).to(output)
        grads = fused_backward(grad, query, key, value, table, mask, seed, output, lse, scale, dropout)
    leaves = [t.detach().float().requires_grad_() for t in (query, key, value, table)]
    keep = keep_mask(seed, *query.shape[:3], dropout) if dropout else None
    expected, expected_lse = toeplitz_attention(*leaves, mask, scale, keep, dropout)
    expected_grads = torch.autograd.grad(expected, leaves, grad.float())
    return (output, lse, *grads), (expected, expected_lse, *expected_grads)


def assert_all_close(got, expected, **tolerance):
    names = ("output", "log-sum-exp", "dQ", "dK", "dV", "d(table)")
    for name, value, reference in zip(names[: len(got)], got, expected, strict=True):
        torch.testing.assert_close(value.float(), reference, **tolerance, msg=lambda text, name=name: f"{name}: {text}")


@pytest.mark.parametrize(
    ("shape", "padded_from", "tiles"),
    [
        ((2, 3, 37, 24), 20, ((16, 16), (16, 32))),  # padding, a length and a head size no tile divides
        ((1, 2, 32, 16), None, ((16, 16), (16, 16))),  # whole tiles, no mask
        ((2, 1, 1, 16), None, None),  # one token
        ((1, 2, 70, 64), 50, None),  # the default tiles
    ],
    ids=["padded-37", "tiles-32", "n-1", "default-tiles"],
)
def test_forward_and_all_four_gradients_match_the_reference(shape, padded_from, tiles):
    got, expected = kernel_and_reference(*inputs(*shape, padded_from=padded_from), tiles=tiles)
    assert_all_close(got, expected, **FP32)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_half_precisions_match_the_reference_to_their_rounding(dtype):
    if dtype == torch.bfloat16 and DEVICE.type == "cpu":
        # Checked with a one-dot kernel: Triton 3.9's interpreter returns numbers of order 1e10 for tl.dot of two
        # bf16 tiles (its bf16 casts are right). The CUDA test below covers bf16.
        pytest.skip("Triton's interpreter computes bf16 dot products wrongly")
    got, expected = kernel_and_reference(*inputs(2, 2, 29, 16, dtype, padded_from=17), tiles=((16, 16), (16, 16)))
    assert got[0].dtype == got[2].dtype == got[5].dtype == dtype
    tolerance = {"atol": 3e-2, "rtol": 3e-2} if dtype == torch.bfloat16 else {"atol": 5e-3, "rtol": 5e-3}
    assert_all_close(got, expected, **tolerance)


def test_a_long_input_matches_the_reference():
    """4,096 tokens on one head of 16, forward (large tiles keep the interpreter's program count low; the backward
    at this length is the slow test below)."""
    query, key, value, table, _ = inputs(1, 1, 4096, 16)
    with tile_sizes(((256, 256), (128, 256))):
        got = fused_forward(query, key, value, table, None, None, 0.25, 0.0)
    expected = toeplitz_attention(query, key, value, table, None, 0.25)
    assert_all_close(got, expected, atol=5e-5, rtol=1e-4)


@pytest.mark.slow
def test_a_long_input_has_all_four_gradients():
    """4,096 tokens, forward and backward (four minutes in the interpreter on two busy cores)."""
    got, expected = kernel_and_reference(*inputs(1, 1, 4096, 16), tiles=((256, 256), (128, 256)))
    assert_all_close(got, expected, atol=5e-5, rtol=1e-4)


def test_a_sequence_of_padding_alone_gives_zeros_and_no_gradient_as_sdpa_does():
    """A row that may attend to no key: PyTorch's SDPA gives zeros (not NaN, which a pooled loss would spread over the
    whole batch's gradients); the other sequence and the table's gradient are those of that sequence alone."""
    query, key, value, table, mask = inputs(2, 2, 37, 16, padded_from=0)
    got, _ = kernel_and_reference(query, key, value, table, mask, tiles=((16, 16), (16, 32)))
    _, expected = kernel_and_reference(query[:1], key[:1], value[:1], table, mask[:1], tiles=((16, 16), (16, 32)))
    stock = torch.nn.functional.scaled_dot_product_attention(
        query[1:].cpu(), key[1:].cpu(), value[1:].cpu(), mask[1:].cpu()
    )
    assert torch.equal(stock, torch.zeros_like(stock))
    output, lse, *grads = got
    assert torch.equal(output[1], torch.zeros_like(output[1])) and bool(torch.isinf(lse[1]).all())
    for name, gradient in zip(("dQ", "dK", "dV"), grads[:3], strict=True):
        assert torch.equal(gradient[1], torch.zeros_like(gradient[1])), name
    assert_all_close((output[:1], lse[:1], *(g[:1] for g in grads[:3]), grads[3]), expected, **FP32)


def test_dropout_gradients_with_the_reproduced_mask_equal_the_reference():
    seed = torch.tensor([1234], device=DEVICE)
    got, expected = kernel_and_reference(*inputs(2, 2, 37, 16, padded_from=25), 0.3, seed, ((16, 16), (16, 32)))
    assert_all_close(got, expected, **FP32)


def test_dropout_is_drawn_from_its_seed_at_the_expected_rate():
    query, key, _, table, _ = inputs(1, 2, 128, 16)
    ones = torch.ones_like(query)
    scale, dropout = 0.25, 0.3
    seed = torch.tensor([99], device=DEVICE)
    first, _ = fused_forward(query, key, ones, table, None, seed, scale, dropout)
    again, _ = fused_forward(query, key, ones, table, None, seed.clone(), scale, dropout)
    other, _ = fused_forward(query, key, ones, table, None, seed + 1, scale, dropout)
    torch.testing.assert_close(first, again, atol=0, rtol=0)
    assert not torch.equal(first, other)
    keep = keep_mask(seed, 1, 2, 128, dropout)
    assert abs(keep.float().mean().item() - (1 - dropout)) < 0.01  # 32,768 draws: 4 standard deviations
    assert not torch.equal(keep[0, 0], keep[0, 1])  # each head draws its own
    # With v = 1 each output is sum_j p_ij keep_ij / (1 - p), whose expectation is 1 (SDPA's scaling of kept values).
    assert abs(first.mean().item() - 1.0) < 0.02


def padded_ids(config, length=13):
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(1, config.vocab_size, (2, length), generator=generator)
    mask = torch.ones(2, length, dtype=torch.long)
    mask[1, 8:] = 0
    return {"input_ids": input_ids.to(DEVICE), "attention_mask": mask.to(DEVICE)}


def test_a_model_on_the_fused_route_equals_the_stored_bias_route(monkeypatch):
    """Output and every parameter's gradient of a padded batch, with the route recorded."""
    config = tiny_config("bert", tisa={"num_kernels": 2, "init": "random"})
    model = AutoModel.from_config(config, attn_implementation="sdpa").to(DEVICE).train()
    batch = padded_ids(config)
    taken = []
    run = attention.FUSED.run
    monkeypatch.setattr(type(attention.FUSED), "run", lambda self, call: taken.append(call) or run(call))
    results = []
    for policy in (attention.FUSED_SDPA_POLICY, attention.DEFAULT_SDPA_POLICY):
        model.zero_grad()
        hidden = model(**batch, tisa_sdpa_policy=policy).last_hidden_state
        hidden.square().sum().backward()
        results.append((hidden.detach(), [p.grad.clone() for p in model.parameters() if p.grad is not None]))
    assert len(taken) == config.num_hidden_layers
    (fused, fused_grads), (stored, stored_grads) = results
    keep = batch["attention_mask"].bool()
    torch.testing.assert_close(fused[keep], stored[keep], **FP32)
    assert len(fused_grads) == len(stored_grads)
    for got, expected in zip(fused_grads, stored_grads, strict=True):
        torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


def test_decoders_leave_the_fused_route_for_one_that_masks_causally(monkeypatch):
    """The kernels have no causal mask: a decoder's self-attention, which transformers hands no mask, takes the
    routes that add it, and gives the causal reference under the fused policy."""
    from reference import reference_forward

    from tests.test_decoders import decoder, hidden_states, token_ids

    model = decoder("bert").to(DEVICE)
    taken = []
    run = attention.FUSED.run
    monkeypatch.setattr(type(attention.FUSED), "run", lambda self, call: taken.append(call) or run(call))
    input_ids = token_ids(model.config).to(DEVICE)
    with torch.no_grad():
        got = hidden_states(model, input_ids, tisa_sdpa_policy=attention.FUSED_SDPA_POLICY)
    expected = reference_forward("bert", model.base_model, input_ids, torch.ones_like(input_ids, dtype=torch.bool))
    assert taken == []
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


def test_the_fused_route_compiles_into_one_graph():
    """torch.compile(fullgraph=True) with the fused route forced: one graph, no break, each attention call one
    operator node forward and backward, and the eager route's output and kernel gradients."""
    config = tiny_config("bert", tisa={"num_kernels": 2, "init": "random"})
    model = AutoModel.from_config(config, attn_implementation="sdpa").to(DEVICE).train()
    batch = {**padded_ids(config), "tisa_sdpa_policy": attention.FUSED_SDPA_POLICY}
    torch._dynamo.reset()
    explained = torch._dynamo.explain(model)(**batch)
    assert (explained.graph_count, explained.graph_break_count) == (1, 0)
    operators = [node.target for graph in explained.graphs for node in graph.graph.nodes if node.op == "call_function"]
    operator = torch.ops.tisa_hf.toeplitz_attention
    assert sum(target in (operator, operator.default) for target in operators) == config.num_hidden_layers
    results = []
    for forward in (model, torch.compile(model, fullgraph=True, backend="aot_eager")):
        model.zero_grad()
        hidden = forward(**batch).last_hidden_state
        hidden.square().sum().backward()
        results.append((hidden.detach(), [p.grad.clone() for p in model.tisa.parameters()]))
    torch.testing.assert_close(results[1][0], results[0][0], atol=0, rtol=0)
    for compiled, eager in zip(results[1][1], results[0][1], strict=True):
        torch.testing.assert_close(compiled, eager, atol=1e-6, rtol=1e-5)


def test_the_fused_route_is_opt_in():
    assert attention.DEFAULT_SDPA_POLICY.routes == attention.policy.STANDARD_SDPA_POLICY.routes
    assert attention.FUSED not in attention.DEFAULT_SDPA_POLICY.routes
    code = "import tisa_hf.attention as a; print(a.DEFAULT_SDPA_POLICY is a.FUSED_SDPA_POLICY)"
    environment = {**os.environ, "TISA_HF_FUSED_ATTENTION": "1"}
    answer = subprocess.run([sys.executable, "-c", code], env=environment, capture_output=True, text=True, check=True)
    assert answer.stdout.strip() == "True"


def test_without_the_interpreter_the_cpu_takes_the_stored_bias_route_and_the_operator_says_why(monkeypatch):
    monkeypatch.setattr(limits, "TRITON_INTERPRETED", False)
    query, key, value, table = (t.cpu() for t in inputs(1, 2, 8, 16)[:4])
    config = tiny_config("bert", tisa={"num_kernels": 2, "init": "random"})
    model = AutoModel.from_config(config, attn_implementation="sdpa")
    call = attention.SdpaCall(query, key, value, None, 0.0, None, model.tisa, 0)
    assert attention.FUSED_SDPA_POLICY.choose(call) is attention.policy.STANDARD_SDPA_POLICY.choose(call)
    with pytest.raises(RuntimeError, match=r"^the fused TISA attention kernel runs on CUDA tensors, or on CPU"):
        torch.ops.tisa_hf.toeplitz_attention(query, key, value, table, None, None, 0.25, 0.0)


@pytest.mark.cuda
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("head_dim", [32, 64, 128])
def test_cuda_fused_route_matches_the_stored_bias_route(dtype, head_dim):
    """On a GPU, with the default tiles: output and the four gradients of a padded BERT-sized batch against the
    reference, in fp32 to fp32 rounding and in fp16/bf16 to their own (the model test above runs on the GPU too,
    against the stored-bias route)."""
    got, expected = kernel_and_reference(*inputs(2, 4, 300, head_dim, dtype, padded_from=211))
    tolerance = FP32 if dtype == torch.float32 else {"atol": 3e-2, "rtol": 3e-2}
    assert_all_close(got, expected, **tolerance)
