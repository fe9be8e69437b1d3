"""Correctness of every fast path: the vectorised bias, its eval-mode cache, the fused CPU bias-gradient
attention, the blockwise long-input attention, autocast dtypes, and the benchmark's reference baseline."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from transformers import BertModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward

import tisa_hf
import tisa_hf.attention as attention
from tests.fixtures import enable_activation_checkpointing, requires_extra, tiny_config
from tisa_hf.attention import blockwise, stored_bias, trainable_bias
from tisa_hf.kernels import TisaPositionBias, toeplitz_from_offsets

pytestmark = pytest.mark.core

HEADS, KERNELS = 3, 2


def random_bias_module(num_layers: int = 2) -> TisaPositionBias:
    module = TisaPositionBias(num_layers, HEADS, KERNELS)
    module.reset_random(window=6, generator=torch.Generator().manual_seed(0))
    return module


def explicit_bias(module: TisaPositionBias, layer: int, length: int) -> torch.Tensor:
    """F[h, i, j] = sum_s a exp(-|b| (j - i - c)^2), one element at a time."""
    a, b, c = (p[layer].tolist() for p in (module.amplitude, module.sharpness, module.center))
    bias = torch.empty(1, HEADS, length, length)
    for h in range(HEADS):
        for i in range(length):
            for j in range(length):
                bias[0, h, i, j] = sum(
                    a[h][s] * math.exp(-abs(b[h][s]) * (j - i - c[h][s]) ** 2) for s in range(KERNELS)
                )
    return bias


def tiny_bert(implementation: str, mode: str = "add", max_positions: int = 64) -> BertModel:
    torch.manual_seed(0)
    config = tiny_config(
        "bert", vocab_size=100, num_hidden_layers=2, intermediate_size=64, max_position_embeddings=max_positions
    )
    config._attn_implementation = implementation
    model = BertModel(config)
    tisa_hf.patch(model, tisa_hf.TisaConfig(num_kernels=3, mode=mode, init="random"))
    return model


def padded_batch(length: int) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    mask = torch.ones(2, length, dtype=torch.long)
    mask[1, length // 2 :] = 0
    return {"input_ids": torch.randint(1, 100, (2, length), generator=generator), "attention_mask": mask}


class Spy:
    """Wraps a function, recording each call's arguments."""

    def __init__(self, function):
        self.function = function
        self.calls: list[tuple[tuple, dict]] = []

    def __call__(self, *args, **kwargs):
        self.calls.append((args, kwargs))
        return self.function(*args, **kwargs)


def test_bias_equals_explicit_per_element_reference():
    module = random_bias_module()
    with torch.no_grad():
        for layer in (0, 1):
            torch.testing.assert_close(module(layer, 7, torch.float32), explicit_bias(module, layer, 7))


@pytest.mark.parametrize(("length", "block"), [(9, 4), (9, 3), (9, 1), (9, 9), (9, 20), (1, 5)])
def test_bias_row_blocks_are_row_major_rows_of_the_full_bias(length, block):
    values = torch.randn(HEADS, 2 * length - 1)
    full = toeplitz_from_offsets(values, length)
    blocks = list(blockwise.ToeplitzBias(values, length).row_blocks(block))
    assert [(start, stop) for start, stop, _ in blocks] == [
        (start, min(start + block, length)) for start in range(0, length, block)
    ]
    for start, stop, rows in blocks:
        assert torch.equal(rows, full[None, :, start:stop])
        assert rows.stride(-1) == 1  # row-major, the fused kernel's fast layout
        assert stop - start == 1 or rows.stride(-2) >= length


def test_blockwise_route_off_the_cpu_reads_contiguous_blocks_of_accelerator_size(monkeypatch):
    """Off the CPU (here the meta device, which computes shapes only) each block's bias is a fresh contiguous tensor,
    never a window into the band that CUDA's kernel might read misaligned, and holds ACCELERATOR_BLOCK_ROWS rows."""
    length, heads = 3000, 2
    query = torch.empty(1, heads, length, 8, device="meta")
    bias = blockwise.ToeplitzBias(torch.empty(heads, 2 * length - 1, device="meta"), length)
    sdpa = torch.nn.functional.scaled_dot_product_attention
    calls = []

    def spy(query, key, value, attn_mask=None, **kwargs):
        calls.append((query.shape[2], attn_mask.is_contiguous()))
        return sdpa(query, key, value, attn_mask=attn_mask, **kwargs)

    monkeypatch.setattr(torch.nn.functional, "scaled_dot_product_attention", spy)
    monkeypatch.setattr(blockwise, "BLOCK_BIAS_BYTES", 0)
    output = blockwise.blockwise_biased_sdpa(query, query, query, None, bias, 0.0, None)
    assert output.shape == query.shape
    assert calls == [(1024, True), (1024, True), (952, True)]


@requires_extra("analysis")  # the benchmark's baseline builds its index with SciPy
def test_benchmark_baseline_builds_the_same_bias():
    from tisa_hf.performance.bench import per_head_loop_bias

    module = random_bias_module()
    with torch.no_grad():
        expected = module(1, 11, torch.float32)
        baseline = per_head_loop_bias(module.amplitude[1], module.sharpness[1], module.center[1], 11)
    torch.testing.assert_close(baseline, expected)


def test_cache_reuses_bias_without_grad_and_rebuilds_after_optimizer_step():
    module = random_bias_module()
    with torch.no_grad():
        first = module(0, 8, torch.float32)
        assert module(0, 8, torch.float32) is first
        assert module(0, 9, torch.float32) is not first
    loss = module(0, 8, torch.float32).square().sum()
    loss.backward()
    torch.optim.SGD(module.parameters(), lr=0.1).step()
    with torch.no_grad():
        after_step = module(0, 8, torch.float32)
    assert after_step is not first
    torch.testing.assert_close(after_step, explicit_bias(module, 0, 8))


def test_cache_rebuilds_after_load_state_dict():
    module = random_bias_module()
    with torch.no_grad():
        first = module(0, 8, torch.float32)
    module.load_state_dict(random_bias_module().state_dict() | {"amplitude": torch.ones(2, HEADS, KERNELS)})
    with torch.no_grad():
        reloaded = module(0, 8, torch.float32)
    assert reloaded is not first
    torch.testing.assert_close(reloaded, explicit_bias(module, 0, 8))


def test_training_builds_a_fresh_bias_with_gradient():
    module = random_bias_module()
    first, second = module(0, 8, torch.float32), module(0, 8, torch.float32)
    assert first is not second and first.requires_grad


def test_cache_skips_biases_beyond_its_limit():
    module = random_bias_module()
    module.cache_limit_bytes = 2 * HEADS * 8 * 8 * 4
    with torch.no_grad():
        small = module(0, 8, torch.float32)
        assert module(0, 8, torch.float32) is small
        large = module(0, 9, torch.float32)
        assert module(0, 9, torch.float32) is not large


@pytest.mark.parametrize("batch_of_bias", [1, 2])
def test_trainable_bias_attention_matches_sdpa_math_path(batch_of_bias):
    generator = torch.Generator().manual_seed(0)
    query, key, value = (torch.randn(2, 4, 10, 8, generator=generator, requires_grad=True) for _ in range(3))
    bias = torch.randn(batch_of_bias, 4, 10, 10, generator=generator, requires_grad=True)
    grad_output = torch.randn(2, 4, 10, 8, generator=generator)
    expected = F.scaled_dot_product_attention(query, key, value, attn_mask=bias, scale=0.3)
    expected_grads = torch.autograd.grad(expected, (query, key, value, bias), grad_output)
    output = trainable_bias.TrainableBiasAttention.apply(query, key, value, bias, 0.3)
    grads = torch.autograd.grad(output, (query, key, value, bias), grad_output)
    torch.testing.assert_close(output, expected)
    for grad, expected_grad in zip(grads, expected_grads, strict=True):
        torch.testing.assert_close(grad, expected_grad)


def test_the_trainable_bias_route_is_taken_only_where_sdpa_would_leave_its_flash_kernel():
    """Each condition changed alone gives its own reason."""
    query = key = torch.zeros(1, 2, 4, 8)
    kernels = TisaPositionBias(1, 2, 1)

    def refusal(query=query, key=key, kernels=kernels, dropout=0.0):
        return trainable_bias.fused_bias_path_refusal(
            attention.SdpaCall(query, key, key, None, dropout, None, kernels, 0)
        )

    assert refusal() is None
    assert refusal(kernels=TisaPositionBias(1, 2, 1).requires_grad_(False)).startswith("no gradient reaches the kern")
    assert refusal(dropout=0.1) == "attention dropout 0.1, which the hand-written backward does not redraw"
    assert refusal(key=torch.zeros(1, 1, 4, 8)) == "the keys have fewer heads than the queries (grouped heads)"
    with torch.autocast("cpu", dtype=torch.bfloat16):
        assert refusal() == "the bias is torch.bfloat16 (autocast) and the query torch.float32"
    assert refusal(query.bfloat16(), key.bfloat16()).startswith("the query is torch.bfloat16: ")
    with torch.no_grad():
        assert refusal().startswith("no gradient reaches the kernels")


def test_patched_sdpa_training_matches_eager_with_padding(monkeypatch):
    spy = Spy(trainable_bias.TrainableBiasAttention.apply)
    monkeypatch.setattr(trainable_bias.TrainableBiasAttention, "apply", spy)
    results = {}
    for implementation in ("sdpa", "eager"):
        model = tiny_bert(implementation)
        output = model(**padded_batch(12)).last_hidden_state
        output.square().sum().backward()
        query_weight = model.encoder.layer[0].attention.self.query.weight
        results[implementation] = (output, model.tisa.amplitude.grad, model.tisa.center.grad, query_weight.grad)
    assert len(spy.calls) == 2  # both sdpa layers took the fused route
    for fused, eager in zip(results["sdpa"], results["eager"], strict=True):
        torch.testing.assert_close(fused, eager, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("frozen_encoder", [True, False])
def test_sdpa_route_keeps_backward_state_when_only_the_kernels_train(monkeypatch, frozen_encoder):
    """The route CUDA takes (no fused CPU bias path): with the encoder frozen the first layer's query, key and value
    require no gradient, so the query handed to SDPA is a leaf that requires one, so that fused kernels keep their
    log-sum-exp; later layers' inputs already depend on the bias. Otherwise it is always the model's query."""
    monkeypatch.setattr(trainable_bias, "fused_bias_path_refusal", lambda call: "the test's CUDA")
    spy = Spy(sdpa_attention_forward)
    monkeypatch.setattr(stored_bias, "sdpa_attention_forward", spy)
    grads = {}
    for implementation in ("sdpa", "eager"):
        model = tiny_bert(implementation)
        for name, parameter in model.named_parameters():
            parameter.requires_grad_(name.startswith("tisa.") or not frozen_encoder)
        model(**padded_batch(12)).last_hidden_state.square().sum().backward()
        grads[implementation] = (model.tisa.amplitude.grad, model.tisa.sharpness.grad, model.tisa.center.grad)
    queries = [args[1] for args, _ in spy.calls]
    assert len(queries) == 2
    assert all(query.requires_grad for query in queries)
    assert [query.is_leaf for query in queries] == [frozen_encoder, False]
    for sdpa_grad, eager_grad in zip(grads["sdpa"], grads["eager"], strict=True):
        torch.testing.assert_close(sdpa_grad, eager_grad, rtol=1e-4, atol=1e-6)


def test_bias_is_broadcast_over_the_batch_without_padding(monkeypatch):
    spy = Spy(sdpa_attention_forward)
    monkeypatch.setattr(stored_bias, "sdpa_attention_forward", spy)
    model = tiny_bert("sdpa").eval()
    with torch.no_grad():
        model(input_ids=torch.randint(1, 100, (3, 10)))
        cached = model.tisa(0, 10, torch.float32)
    masks = [args[4] for args, _ in spy.calls]
    assert [tuple(mask.shape) for mask in masks] == [(1, 4, 10, 10)] * 2
    assert masks[0] is cached


def test_blockwise_long_input_path_matches_eager(monkeypatch):
    monkeypatch.setattr(blockwise, "BLOCK_BIAS_BYTES", 2 * 4 * 100 * 4 * 7)  # blocks of 7 query rows
    spy = Spy(blockwise.blockwise_biased_sdpa)
    monkeypatch.setattr(blockwise, "blockwise_biased_sdpa", spy)
    outputs = {}
    for implementation in ("sdpa", "eager"):
        model = tiny_bert(implementation, mode="replace").eval()
        model.tisa.cache_limit_bytes = 0
        with torch.no_grad():
            outputs[implementation] = model(**padded_batch(100)).last_hidden_state  # beyond the 64 positions
    assert len(spy.calls) == 2
    torch.testing.assert_close(outputs["sdpa"], outputs["eager"], rtol=1e-4, atol=1e-5)


def test_blockwise_blocks_fill_an_accelerator_and_keep_the_cpu_block_size():
    """A 32,768-token row of 12 heads' bias is 1.5 MiB: 42 rows fit the CPU's 64 MiB; a GPU gets 1,024, enough
    query tiles to occupy its multiprocessors; no block is longer than the input."""
    row_bytes = 12 * 32768 * 4
    assert blockwise.blockwise_rows(32768, row_bytes, torch.device("cpu")) == 42
    assert blockwise.blockwise_rows(32768, row_bytes, torch.device("cuda")) == 1024
    assert blockwise.blockwise_rows(8192, 12 * 8192 * 4, torch.device("cpu")) == 170
    assert blockwise.blockwise_rows(8192, 12 * 8192 * 4, torch.device("cuda")) == 1024
    assert blockwise.blockwise_rows(600, 12 * 32768 * 4, torch.device("cuda")) == 600
    assert blockwise.blockwise_rows(32768, 2**30, torch.device("cpu")) == 1


def test_bias_follows_autocast_dtype(monkeypatch):
    spy = Spy(sdpa_attention_forward)
    monkeypatch.setattr(stored_bias, "sdpa_attention_forward", spy)
    model = tiny_bert("sdpa")
    with torch.autocast("cpu", dtype=torch.bfloat16):
        output = model(**padded_batch(12)).last_hidden_state
    output.float().square().sum().backward()
    dtypes = {(args[1].dtype, args[4].dtype) for args, _ in spy.calls}
    assert dtypes == {(torch.bfloat16, torch.bfloat16)}
    assert torch.isfinite(model.tisa.amplitude.grad).all()


@pytest.mark.parametrize("length", [1, 7, 64, 300])
def test_one_evaluation_for_all_layers_is_bitwise_that_of_each_layer(length):
    """`layer_tables` evaluates every layer's kernels at once: the values and the parameters' gradients are bit for
    bit those of one evaluation per layer (`_evaluate` with a layer: the code every layer ran before)."""
    module = TisaPositionBias(5, HEADS, 3)
    module.reset_random(window=40, generator=torch.Generator().manual_seed(length))
    parameters = (module.amplitude, module.sharpness, module.center)
    grad_output = torch.randn(5, HEADS, 2 * length - 1, generator=torch.Generator().manual_seed(1))
    tables = module.layer_tables(length, torch.float32)
    together = torch.autograd.grad(tables, parameters, grad_output.unbind(0))
    per_layer = [torch.zeros_like(parameter) for parameter in parameters]
    for layer in range(5):
        values = module._evaluate(length, torch.float32, layer)
        assert torch.equal(tables[layer], values)
        for total, grad in zip(per_layer, torch.autograd.grad(values, parameters, grad_output[layer]), strict=True):
            total += grad
    for grad, expected in zip(together, per_layer, strict=True):
        assert torch.equal(grad, expected)


class EvaluationCounter:
    """Counts `TisaPositionBias._evaluate` calls (one per layer, or one per forward for all layers)."""

    def __init__(self, monkeypatch):
        self.calls = 0
        evaluate = TisaPositionBias._evaluate

        def counted(module, *args):
            self.calls += 1
            return evaluate(module, *args)

        monkeypatch.setattr(TisaPositionBias, "_evaluate", counted)


def training_step(model: BertModel, length: int) -> list[torch.Tensor]:
    model.zero_grad()
    output = model(**padded_batch(length)).last_hidden_state
    output.mul(torch.randn(output.shape, generator=torch.Generator().manual_seed(2))).sum().backward()
    return [output.detach()] + [p.grad.clone() for p in model.parameters() if p.grad is not None]


@pytest.mark.parametrize(("implementation", "mode", "length"), [("sdpa", "add", 12), ("eager", "replace", 100)])
def test_a_forward_evaluates_the_kernels_once_with_bitwise_the_per_layer_results(
    monkeypatch, implementation, mode, length
):
    """A training step inside the encoder's forward (one evaluation) against the same layers outside it (one
    evaluation a layer, as before): outputs and every parameter's gradient bit for bit; inference likewise, through
    the stored bias and (beyond the cache) the blockwise route."""
    counter = EvaluationCounter(monkeypatch)
    model = tiny_bert(implementation, mode)
    shared = training_step(model, length)
    assert counter.calls == 1
    monkeypatch.setattr(TisaPositionBias, "begin_forward", lambda self: None)  # every layer on its own
    per_layer = training_step(model, length)
    assert counter.calls == 1 + 2
    for got, expected in zip(shared, per_layer, strict=True):
        assert torch.equal(got, expected)
    monkeypatch.undo()
    model.eval().tisa.cache_limit_bytes = 0
    with torch.no_grad():
        blockwise = model(**padded_batch(length)).last_hidden_state
        model.tisa.begin_forward = lambda: None
        assert torch.equal(blockwise, model(**padded_batch(length)).last_hidden_state)


def test_shared_kernels_evaluate_once_and_sum_their_gradients_in_another_order(monkeypatch):
    """With one set of kernels for all layers the layers' gradients meet before the kernels' backward instead of
    after it: outputs are bitwise those of one evaluation a layer, gradients equal up to float rounding."""
    torch.manual_seed(0)
    config = tiny_config("bert", vocab_size=100, num_hidden_layers=2, intermediate_size=64)
    config._attn_implementation = "sdpa"
    model = tisa_hf.patch(BertModel(config), tisa_hf.TisaConfig(num_kernels=3, init="random", share_across_layers=True))
    counter = EvaluationCounter(monkeypatch)
    shared = training_step(model, 12)
    assert counter.calls == 1
    monkeypatch.setattr(TisaPositionBias, "begin_forward", lambda self: None)
    per_layer = training_step(model, 12)
    names = ["output"] + [name for name, p in model.named_parameters() if p.grad is not None]
    for name, got, expected in zip(names, shared, per_layer, strict=True):
        if name.startswith("tisa."):
            torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-6)
        else:
            assert torch.equal(got, expected), name


def test_tables_are_per_forward_only(monkeypatch):
    """Outside the encoder's forward (a checkpoint's recompute, a direct call) each call evaluates anew; a second
    forward never reuses the first one's table, whose graph its backward freed; activation checkpointing keeps
    one evaluation a layer."""
    counter = EvaluationCounter(monkeypatch)
    model = tiny_bert("sdpa")
    training_step(model, 12)
    training_step(model, 12)  # gradient accumulation: same parameters, a fresh table
    assert counter.calls == 2 and model.tisa._forward_tables is None
    model.tisa.offset_table(0, 12, torch.float32)
    assert counter.calls == 3
    enable_activation_checkpointing(model)
    training_step(model, 12)
    assert counter.calls == 3 + 2 * 2  # each layer's own, and again in its recompute
