"""Export of TISA models as users and exporters call them (eval mode, grad mode on): `torch.export.export` and
`torch.onnx.export(..., dynamo=True)` with a dynamic batch and length give programs equal to eager at other sizes,
with no operator of one device in them (the policy's traced routes, `tisa_hf/attention/policy.py`)."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModel

import tisa_hf
import tisa_hf.attention as attention
from tests.fixtures import MODEL_TYPES, tiny_config

MODES = ("add", "replace")
# The example the program is traced with, and the other sizes it is then called at: another batch and length, one
# sequence padded.
EXAMPLE_SIZE, CALL_SIZE = (2, 9), (3, 13)


def tiny_tisa_model(model_type: str, mode: str) -> torch.nn.Module:
    """A tiny random TISA encoder with random kernels, in eval mode, its parameters trainable (as users leave them)."""
    plain = AutoModel.from_config(tiny_config(model_type))
    return tisa_hf.patch(plain, tisa_hf.TisaConfig(mode=mode, init="random", num_kernels=2)).eval()


def padded_batch(size: tuple[int, int], vocab_size: int, seed: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids from 5 up (past every tiny config's special ids) and a mask that pads the first sequence's tail."""
    generator = torch.Generator().manual_seed(seed)
    ids = torch.randint(5, vocab_size, size, generator=generator)
    mask = torch.ones_like(ids)
    mask[0, size[1] - 3 :] = 0
    return ids, mask


def dynamic_batch_and_length() -> tuple[dict, dict]:
    return ({0: torch.export.Dim.AUTO, 1: torch.export.Dim.AUTO},) * 2


def called_operators(program: torch.export.ExportedProgram) -> set[str]:
    return {str(node.target) for node in program.graph.nodes if node.op == "call_function"}


def device_bound_operators(operators: set[str]) -> set[str]:
    """Operators that run on one kind of device only: PyTorch's per-device attention kernels (`..._for_cpu`, flash,
    memory-efficient, cuDNN) and tisa_hf's own (the banded route's)."""
    device_bound = ("_for_cpu", "_flash_attention", "_efficient_attention", "_cudnn_attention", "tisa_hf.")
    return {operator for operator in operators if any(mark in operator for mark in device_bound)}


# Every architecture in grad mode (the case that took the CPU's trainable-bias route), each mode, and without gradients.
EXPORT_CASES = [
    *((model_type, "add", True) for model_type in MODEL_TYPES),
    ("bert", "replace", True),
    ("distilbert", "replace", True),
    ("bert", "add", False),
    ("bert", "replace", False),
]


@pytest.mark.parametrize("model_type, mode, grad", EXPORT_CASES)
def test_torch_export_equals_eager_at_other_sizes(model_type, mode, grad):
    model = tiny_tisa_model(model_type, mode)
    example = padded_batch(EXAMPLE_SIZE, model.config.vocab_size, seed=1)
    with torch.set_grad_enabled(grad):
        program = torch.export.export(model, example, dynamic_shapes=dynamic_batch_and_length())
    operators = called_operators(program)
    assert device_bound_operators(operators) == set()
    # A bias that trains is written out (its gradient stays in the program); a frozen one keeps PyTorch's SDPA.
    assert ("aten.scaled_dot_product_attention.default" in operators) is not grad
    inputs = padded_batch(CALL_SIZE, model.config.vocab_size, seed=2)
    exported = program.module()(*inputs).last_hidden_state
    eager = model(*inputs).last_hidden_state
    torch.testing.assert_close(exported, eager, rtol=0, atol=1e-5)


def test_exported_program_carries_the_kernels_gradient():
    model = tiny_tisa_model("bert", "add")
    example = padded_batch(EXAMPLE_SIZE, model.config.vocab_size, seed=1)
    program = torch.export.export(model, example, dynamic_shapes=dynamic_batch_and_length())
    inputs = padded_batch(CALL_SIZE, model.config.vocab_size, seed=2)
    exported = program.module()
    exported(*inputs).last_hidden_state.square().sum().backward()
    model(*inputs).last_hidden_state.square().sum().backward()
    kernels = tisa_hf.attaching.tisa_bias_module(model.base_model)
    exported_amplitude = dict(exported.named_parameters())[
        next(name for name, value in model.named_parameters() if value is kernels.amplitude)
    ]
    assert kernels.amplitude.grad.abs().sum() > 0
    torch.testing.assert_close(exported_amplitude.grad, kernels.amplitude.grad, rtol=1e-4, atol=1e-6)


def test_tracing_takes_the_traced_policy(monkeypatch):
    chosen = []
    choose = attention.SdpaPolicy.choose

    def recording_choose(policy, call):
        chosen.append((policy, torch.compiler.is_exporting()))
        return choose(policy, call)

    monkeypatch.setattr(attention.SdpaPolicy, "choose", recording_choose)
    model = tiny_tisa_model("bert", "add")
    example = padded_batch(EXAMPLE_SIZE, model.config.vocab_size, seed=1)
    model(*example)
    torch.export.export(model, example)
    layers = model.config.num_hidden_layers
    assert chosen == [(attention.DEFAULT_SDPA_POLICY, False)] * layers + [(attention.TRACED_SDPA_POLICY, True)] * layers
    traced_routes = (attention.PLAIN, attention.TRACED_TRAINABLE_BIAS, attention.STORED_BIAS)
    assert attention.TRACED_SDPA_POLICY.routes == traced_routes


@pytest.fixture(scope="module")
def onnx_runtime():
    pytest.importorskip("onnxscript", reason="ONNX export needs the test extra (onnx, onnxscript, onnxruntime)")
    return pytest.importorskip("onnxruntime", reason="ONNX export needs the test extra (onnx, onnxscript, onnxruntime)")


def onnx_round_trip(model, onnx_runtime, path, call_size: tuple[int, int]) -> None:
    """Exports `model` to ONNX with a dynamic batch and length and runs it in ONNX Runtime at `call_size`, against
    eager."""
    example = padded_batch(EXAMPLE_SIZE, model.config.vocab_size, seed=1)
    torch.onnx.export(
        model,
        example,
        path,
        dynamo=True,
        input_names=["input_ids", "attention_mask"],
        output_names=["last_hidden_state", "pooler_output"],
        dynamic_shapes=dynamic_batch_and_length(),
        verbose=False,
    )
    session = onnx_runtime.InferenceSession(str(path), providers=["CPUExecutionProvider"])
    ids, mask = padded_batch(call_size, model.config.vocab_size, seed=2)
    (hidden,) = session.run(["last_hidden_state"], {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
    eager = model(ids, mask).last_hidden_state.detach()
    torch.testing.assert_close(torch.from_numpy(hidden), eager, rtol=0, atol=1e-4)


def test_onnx_export_of_minilm_runs_in_onnx_runtime_as_eager(minilm, onnx_runtime, tmp_path):
    """The packaged MiniLM with random kernels, exported as users call it (eval, no `torch.no_grad`)."""
    model = AutoModel.from_pretrained(minilm, tisa=tisa_hf.TisaConfig(mode="add", init="random", num_kernels=2)).eval()
    onnx_round_trip(model, onnx_runtime, tmp_path / "model.onnx", CALL_SIZE)


def test_onnx_export_in_replace_mode_reads_past_the_position_table(onnx_runtime, tmp_path):
    model = tiny_tisa_model("bert", "replace")
    longer = (3, model.config.max_position_embeddings + 10)
    onnx_round_trip(model, onnx_runtime, tmp_path / "model.onnx", longer)
