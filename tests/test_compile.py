"""TISA models under `torch.compile`: one graph like the stock model, outputs and kernel gradients equal to eager,
recompiled exactly when the stock model is, long inputs on their eager routes, and a compiled training run from the
command line.

Most cases compile with the `aot_eager` backend: it traces what Inductor traces (Dynamo's graph and AOTAutograd's
forward and backward) without generating C++, so a case costs seconds; its outputs equal eager's bit for bit
(checked with a tolerance of 0 where the route is the same). One case runs Inductor itself, within 1e-5.
"""

from __future__ import annotations

import json

import pytest
import torch
from safetensors.torch import load_file
from torch._dynamo.utils import counters
from transformers import AutoModelForSequenceClassification

import tisa_hf
from tests.fixtures import MODEL_TYPES, TINY, glue_argv, requires_extra, tiny_config, write_rte_tsv, write_tiny_model
from tests.test_banded import narrow_model
from tisa_hf.adapt.arguments import ADAPT_ARGUMENTS
from tisa_hf.commands.glue import main as glue_main
from tisa_hf.finetune.arguments import parse_arguments
from tisa_hf.finetune.classify.options import CLASSIFY_ARGUMENTS
from tisa_hf.finetune.glue.options import GLUE_ARGUMENTS
from tisa_hf.finetune.squad.options import SQUAD_ARGUMENTS

pytestmark = pytest.mark.core

CLASSIFIER_DROPOUT = {"albert": "classifier_dropout_prob", "distilbert": "seq_classif_dropout"}


def classifier(model_type: str, mode: str | None, implementation: str = "sdpa", seed: int = 0):
    """A tiny sequence classifier of `model_type` without any dropout, with random TISA kernels in `mode` (None: the
    stock model)."""
    torch.manual_seed(seed)
    dropout = {CLASSIFIER_DROPOUT.get(model_type, "classifier_dropout"): 0.0}
    config = tiny_config(model_type, num_labels=2, attn_implementation=implementation, **dropout)
    model = AutoModelForSequenceClassification.from_config(config)
    if mode is not None:
        tisa_hf.patch(model, tisa_hf.TisaConfig(num_kernels=3, mode=mode, init="random"))
    return model


def padded_batch(length: int = 12) -> dict[str, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(5, 90, (2, length), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, length - 4 :] = 0
    return {"input_ids": input_ids, "attention_mask": attention_mask}


def graphs_and_breaks(model, inputs: dict, training: bool) -> tuple[int, int]:
    model.train(training)
    torch._dynamo.reset()
    with torch.set_grad_enabled(training):
        explained = torch._dynamo.explain(model)(**inputs)
    return explained.graph_count, explained.graph_break_count


def logits_and_kernel_gradients(model, forward, inputs: dict, training: bool):
    model.train(training)
    model.zero_grad()
    if not training:
        with torch.inference_mode():
            return forward(**inputs).logits, []
    logits = forward(**inputs).logits
    logits.square().sum().backward()
    return logits.detach(), [parameter.grad.clone() for parameter in model.base_model.tisa.parameters()]


@pytest.mark.parametrize("model_type", MODEL_TYPES)
def test_a_tisa_model_is_one_graph_like_the_stock_model(model_type):
    """Every architecture, both modes, training and inference, on a padded batch (and BERT without a padding mask
    too): as many graphs as the stock model (one) and no graph break."""
    batches = [padded_batch()]
    if model_type == "bert":
        batches.append({"input_ids": batches[0]["input_ids"]})
    for inputs in batches:
        for training in (True, False):
            stock = graphs_and_breaks(classifier(model_type, None), inputs, training)
            assert stock == (1, 0)
            for mode in ("add", "replace"):
                assert graphs_and_breaks(classifier(model_type, mode), inputs, training) == stock, (mode, training)


@pytest.mark.parametrize("model_type", ["bert", "albert"])
@pytest.mark.parametrize("mode", ["add", "replace"])
@pytest.mark.parametrize("implementation", ["sdpa", "eager"])
def test_fullgraph_compile_equals_eager(model_type, mode, implementation):
    """Logits of `torch.compile(model, fullgraph=True)` are eager's, in training and inference, on a padded batch;
    the kernels' gradients agree to float32 rounding (a compiled graph evaluates each layer's kernels and expands
    them by an index, so their backward sums in another order)."""
    model = classifier(model_type, mode, implementation)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    torch._dynamo.reset()
    for training in (True, False):
        logits, gradients = logits_and_kernel_gradients(model, model, padded_batch(), training)
        compiled_logits, compiled_gradients = logits_and_kernel_gradients(model, compiled, padded_batch(), training)
        torch.testing.assert_close(compiled_logits, logits, atol=0, rtol=0)
        for compiled_gradient, gradient in zip(compiled_gradients, gradients, strict=True):
            torch.testing.assert_close(compiled_gradient, gradient, atol=1e-6, rtol=1e-5)
        assert len(gradients) == (3 if training else 0)


def test_inductor_training_step_equals_eager():
    model = classifier("bert", "replace")
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True)
    logits, gradients = logits_and_kernel_gradients(model, model, padded_batch(), True)
    compiled_logits, compiled_gradients = logits_and_kernel_gradients(model, compiled, padded_batch(), True)
    torch.testing.assert_close(compiled_logits, logits, atol=1e-5, rtol=1e-5)
    for compiled_gradient, gradient in zip(compiled_gradients, gradients, strict=True):
        torch.testing.assert_close(compiled_gradient, gradient, atol=1e-5, rtol=1e-5)


def test_dynamic_shapes_recompile_as_the_stock_model_does():
    """With `dynamic=True` a change of batch size or length compiles nothing new (training, forward and backward),
    for TISA as for the stock model; with the default (`dynamic=None`) both compile three times (inference): static
    shapes first, then again with the batch size symbolic once it changes, then with the length symbolic too."""
    shapes = [(2, 16), (4, 16), (2, 24), (3, 30)]

    def frames(mode, dynamic, training):
        model = classifier("bert", mode).train(training)
        torch._dynamo.reset()
        counters.clear()
        compiled = torch.compile(model, backend="aot_eager", dynamic=dynamic)
        for batch, length in shapes:
            input_ids = torch.randint(5, 90, (batch, length))
            with torch.set_grad_enabled(training):
                logits = compiled(input_ids=input_ids, attention_mask=torch.ones_like(input_ids)).logits
            if training:
                logits.sum().backward()
        return counters["stats"]["unique_graphs"]

    assert frames("replace", True, training=True) == frames(None, True, training=True) == 1
    assert frames("replace", None, training=False) == frames(None, None, training=False) == 3


@pytest.mark.parametrize(
    ("far_field", "width", "padded"),
    [("none", 1.0, True), ("none", 1.0, False), ("none", 4.0, True), ("log", 1.0, True)],
    ids=["banded, padded", "banded", "band too wide", "far field"],
)
def test_long_inputs_compile_on_their_eager_routes(far_field, width, padded):
    """Inputs beyond the bias cache: the banded route (an operator that reads its band when it runs) and the
    blockwise one compile in one graph and give eager's outputs. Without a padding mask a compiled model gets
    transformers' all-ones mask where eager gets none (it cannot test the mask's values while tracing), so the
    banded route corrects a plain call instead of splitting the keys: equal to rounding."""
    model = narrow_model(far_field=far_field, width=width)
    input_ids = torch.randint(1, 99, (3, 160), generator=torch.Generator().manual_seed(3))
    attention_mask = torch.ones_like(input_ids)
    if padded:
        attention_mask[1, 120:] = 0
    torch._dynamo.reset()
    with torch.inference_mode():
        eager = model(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
        compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
        output = compiled(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state
    tolerance = 0 if padded else 1e-5
    torch.testing.assert_close(output, eager, atol=tolerance, rtol=tolerance)


def test_the_eager_bias_cache_is_kept_beside_a_compiled_model():
    model = classifier("bert", "add").eval()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    torch._dynamo.reset()
    with torch.inference_mode():
        compiled(**padded_batch())
        first = model.base_model.tisa(0, 12, torch.float32)
        assert model.base_model.tisa(0, 12, torch.float32) is first  # eager calls still share the cached bias


def test_a_lora_tisa_model_compiles_in_one_graph():
    peft = pytest.importorskip("peft")
    config = peft.LoraConfig(r=4, target_modules=["query", "value"], modules_to_save=["tisa"])
    model = peft.get_peft_model(classifier("bert", "replace"), config)
    assert graphs_and_breaks(model, padded_batch(), training=True) == (1, 0)
    model.train()
    torch._dynamo.reset()
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    torch.testing.assert_close(compiled(**padded_batch()).logits, model(**padded_batch()).logits, atol=0, rtol=0)


@requires_extra("finetune")
def test_a_compiled_glue_run_trains_like_an_eager_one(tmp_path):
    """`tisa-hf glue --torch-compile` trains through Accelerate's dynamo plugin, also after an eager run in the same
    process: the run's weights are saved under the model's own names and equal the eager run's."""
    write_rte_tsv(tmp_path / "RTE")
    write_tiny_model(tmp_path / "bert")
    tisa = ("--tisa.num_kernels", "2", "--tisa.mode", "replace", "--tisa.init", "random")
    compiled_run, eager_run = tmp_path / "compiled", tmp_path / "eager"
    assert glue_main(glue_argv(tmp_path, eager_run, *tisa)) == 0  # first: its settings must not carry over
    torch._dynamo.reset()
    counters.clear()
    compile_options = ("--torch-compile", "--torch-compile-backend", "aot_eager")
    assert glue_main(glue_argv(tmp_path, compiled_run, *tisa, *compile_options)) == 0
    assert counters["stats"]["unique_graphs"] >= 1  # the model was compiled
    compiled_weights, eager_weights = (
        load_file(compiled_run / "model.safetensors"),
        load_file(eager_run / "model.safetensors"),
    )
    assert compiled_weights.keys() == eager_weights.keys()
    assert not any("_orig_mod" in name for name in compiled_weights)
    for name, weight in eager_weights.items():
        torch.testing.assert_close(compiled_weights[name], weight, atol=1e-6, rtol=1e-5, msg=name)
    assert json.loads((compiled_run / "metrics.json").read_text())["config"]["torch_compile"] is True


@pytest.mark.parametrize(
    ("options", "required"),
    [
        (GLUE_ARGUMENTS, []),
        (SQUAD_ARGUMENTS, []),
        (CLASSIFY_ARGUMENTS, ["--data-dir", "documents"]),
        (ADAPT_ARGUMENTS, []),
    ],
    ids=["glue", "squad", "classify", "adapt"],
)
def test_every_training_command_takes_the_compile_switch(options, required):
    def compile_settings(argv):
        parsed = parse_arguments(options, required + argv, prog="test")
        training = next(value for value in parsed if hasattr(value, "torch_compile"))
        return training.torch_compile, training.torch_compile_backend, training.torch_compile_mode

    assert compile_settings([]) == (False, "inductor", None)
    argv = ["--torch-compile", "--torch-compile-backend", "aot_eager", "--torch-compile-mode", "max-autotune"]
    assert compile_settings(argv) == (True, "aot_eager", "max-autotune")


@requires_extra("analysis")
def test_bench_compiles_the_models_of_every_pair(monkeypatch, tmp_path):
    """`tisa-hf bench --compile` times each pair's compiled models compiled: with Dynamo's recompile limit at 2 (the
    two compiled models of one pair), a run of four pairs compiles all eight, where models of earlier pairs would
    fill the limit and leave later ones to run eager."""
    from tisa_hf.performance import bench, cases

    tiny = {key: TINY[key] for key in ("num_hidden_layers", "num_attention_heads", "hidden_size", "intermediate_size")}
    monkeypatch.setattr(cases, "BERT_BASE_SIZES", tiny)
    counters.clear()
    output = tmp_path / "bench.json"
    argv = ["--device", "cpu", "--sections", "train", "infer", "--implementations", "sdpa", "--compile"]
    argv += ["--compile-backend", "aot_eager", "--no-memory", "--warmup", "0", "--repeats", "1"]
    # torch's own patch: a config module's attribute is a property that monkeypatch's undo would delete.
    with torch._dynamo.config.patch(recompile_limit=2):
        assert bench.main([*argv, "--output", str(output)]) == 0
    assert counters["stats"]["unique_graphs"] == 8
    rows = json.loads(output.read_text())
    shapes = [(row["section"], row["batch"], row["length"]) for section in ("train", "infer") for row in rows[section]]
    assert shapes == [("train", 8, 128), ("train", 2, 512), ("infer", 8, 128), ("infer", 2, 512)]
