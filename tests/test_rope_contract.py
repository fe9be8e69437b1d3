"""The contract of transformers' classes, for the RoPE encoders' TISA classes as for the BERT era's: the Auto class of
every head transformers registers, pickling, `torch.compile(fullgraph=True)`, `torch.export` and ONNX, LoRA, a Hub
card, and the sentence-transformers conversion, on the tiny checkpoints of `rope_checkpoint`."""

from __future__ import annotations

import pickle
from inspect import signature
from unittest.mock import patch

import pytest
import torch
import transformers
import transformers.models.auto.modeling_auto as auto_models
from transformers import AutoModel, BertTokenizerFast, PreTrainedModel

import tisa_hf
from tests.fixtures import (
    ROPE_RANGE,
    WORDS,
    FirstTokenTask,
    requires_extra,
    rope_params,
    short_trainer,
    tiny_rope_config,
)
from tisa_hf import TisaConfig
from tisa_hf.adapters import adapter_for
from tisa_hf.errors import UsageError
from tisa_hf.modeling import tisa_model_class

pytestmark = pytest.mark.core

RANDOM = {"num_kernels": 2, "init": "random"}
# The costlier checks (compiling, exporting, LoRA, sentence-transformers) run on ModernBERT by default and on the other
# three with `-m slow`, keeping the suite's time.
EACH_SLOW_BUT_MODERNBERT = pytest.mark.parametrize("rope_model_type", rope_params(fast=("modernbert",)))


def padded_batch(length: int = 12, seed: int = 1) -> tuple[torch.Tensor, torch.Tensor]:
    input_ids = torch.randint(5, 99, (2, length), generator=torch.Generator().manual_seed(seed))
    mask = torch.ones_like(input_ids)
    mask[0, length - 3 :] = 0
    return input_ids, mask


def tisa_encoder(folder: str, mode: str, implementation: str = "sdpa") -> torch.nn.Module:
    return AutoModel.from_pretrained(
        folder, tisa=TisaConfig(mode=mode, **RANDOM), attn_implementation=implementation
    ).eval()


@EACH_SLOW_BUT_MODERNBERT
def test_every_head_transformers_registers_has_its_tisa_class(rope_checkpoint, rope_model_type):
    adapter = adapter_for(rope_model_type)
    heads = []
    for name in dir(auto_models):
        mapping = getattr(getattr(auto_models, name), "_model_mapping", None)
        if name.startswith("AutoModel") and mapping is not None and adapter.config_class in mapping:
            auto_class = getattr(auto_models, name)
            model = auto_class.from_pretrained(rope_checkpoint, tisa=TisaConfig(init="zeros"))
            assert type(model) is tisa_model_class(mapping[adapter.config_class])
            heads.append(name)
    assert {"AutoModel", "AutoModelForMaskedLM", "AutoModelForSequenceClassification"} <= set(heads)


@EACH_SLOW_BUT_MODERNBERT
@pytest.mark.parametrize("mode", ["add", "replace"])
def test_pickling_keeps_the_outputs(rope_checkpoint, mode):
    model = tisa_encoder(rope_checkpoint, mode)
    input_ids, mask = padded_batch()
    with torch.no_grad():
        expected = model(input_ids, attention_mask=mask).last_hidden_state
        again = pickle.loads(pickle.dumps(model))
        assert type(again) is type(model)
        assert torch.equal(again(input_ids, attention_mask=mask).last_hidden_state, expected)


@EACH_SLOW_BUT_MODERNBERT
@pytest.mark.parametrize("mode", ["add", pytest.param("replace", marks=pytest.mark.slow)])
def test_fullgraph_compile_equals_eager(rope_checkpoint, mode):
    model = tisa_encoder(rope_checkpoint, mode)
    compiled = torch.compile(model, fullgraph=True, backend="aot_eager")
    torch._dynamo.reset()
    input_ids, mask = padded_batch()
    for training in (True, False):
        model.train(training)
        model.zero_grad()
        outputs = []
        for forward in (model, compiled):
            hidden = forward(input_ids, attention_mask=mask).last_hidden_state
            hidden.square().sum().backward()
            outputs.append((hidden.detach(), model.tisa.amplitude.grad.clone()))
            model.zero_grad()
        torch.testing.assert_close(outputs[1][0], outputs[0][0], atol=0, rtol=0)
        torch.testing.assert_close(outputs[1][1], outputs[0][1], atol=1e-6, rtol=1e-5)


@EACH_SLOW_BUT_MODERNBERT
def test_torch_export_equals_eager_past_the_rotary_range(rope_checkpoint):
    """`replace` exported at one size runs at another, past the rotary range, as eager does (the kernels' gradient
    kept in the program)."""
    model = tisa_encoder(rope_checkpoint, "replace")
    dynamic = ({0: torch.export.Dim.AUTO, 1: torch.export.Dim.AUTO},) * 2
    program = torch.export.export(model, padded_batch(12), dynamic_shapes=dynamic)
    inputs = padded_batch(2 * ROPE_RANGE + 3, seed=2)
    torch.testing.assert_close(
        program.module()(*inputs).last_hidden_state, model(*inputs).last_hidden_state, rtol=0, atol=1e-5
    )


@pytest.mark.slow
def test_onnx_export_runs_in_onnx_runtime_as_eager(rope_checkpoints, tmp_path):
    onnx_runtime = pytest.importorskip("onnxruntime")
    pytest.importorskip("onnxscript")
    model = tisa_encoder(rope_checkpoints["modernbert"], "replace")
    torch.onnx.export(
        model,
        padded_batch(12),
        tmp_path / "model.onnx",
        dynamo=True,
        input_names=["input_ids", "attention_mask"],
        output_names=["last_hidden_state"],
        dynamic_shapes=({0: torch.export.Dim.AUTO, 1: torch.export.Dim.AUTO},) * 2,
        verbose=False,
    )
    session = onnx_runtime.InferenceSession(str(tmp_path / "model.onnx"), providers=["CPUExecutionProvider"])
    ids, mask = padded_batch(2 * ROPE_RANGE, seed=2)
    (hidden,) = session.run(["last_hidden_state"], {"input_ids": ids.numpy(), "attention_mask": mask.numpy()})
    torch.testing.assert_close(torch.from_numpy(hidden), model(ids, mask).last_hidden_state.detach(), rtol=0, atol=1e-4)


@EACH_SLOW_BUT_MODERNBERT
def test_lora_trains_the_kernels_and_reloads(rope_checkpoint, tmp_path):
    peft = pytest.importorskip("peft")
    base = AutoModel.from_pretrained(rope_checkpoint, tisa=TisaConfig(**RANDOM))
    base.save_pretrained(tmp_path / "base")
    config = peft.LoraConfig(r=4, target_modules="all-linear", modules_to_save=["tisa"])
    model = peft.get_peft_model(AutoModel.from_pretrained(tmp_path / "base"), config)
    input_ids, mask = padded_batch()
    model(input_ids, attention_mask=mask).last_hidden_state.square().mean().backward()
    trained = model.base_model.model.tisa.modules_to_save["default"]
    assert trained.amplitude.grad is not None and trained.amplitude.grad.abs().sum() > 0
    model.eval()
    with torch.no_grad():
        expected = model(input_ids, attention_mask=mask).last_hidden_state
    model.save_pretrained(tmp_path / "adapter")
    reloaded = peft.PeftModel.from_pretrained(AutoModel.from_pretrained(tmp_path / "base"), tmp_path / "adapter")
    with torch.no_grad():
        assert torch.equal(reloaded.eval()(input_ids, attention_mask=mask).last_hidden_state, expected)


def write_tokenizer(folder) -> None:
    vocab = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]
    BertTokenizerFast(vocab={token: index for index, token in enumerate(vocab)}).save_pretrained(folder)


@EACH_SLOW_BUT_MODERNBERT
@requires_extra("st")
@pytest.mark.parametrize("mode", ["add", "replace"])
def test_a_sentence_transformer_takes_tisa_and_round_trips(rope_checkpoint, mode, tmp_path):
    from sentence_transformers import SentenceTransformer

    from tisa_hf.common.sentence_models import save_sentence_transformer, to_tisa_sentence_transformer

    folder = tmp_path / "base"
    AutoModel.from_pretrained(rope_checkpoint).save_pretrained(folder)
    write_tokenizer(folder)
    plain = SentenceTransformer(str(folder), device="cpu")
    limit = 4 * ROPE_RANGE if mode == "replace" else None
    model = to_tisa_sentence_transformer(plain, TisaConfig(mode=mode, **RANDOM), max_seq_length=limit)
    assert model.max_seq_length == (limit or ROPE_RANGE)
    text = " ".join(WORDS * 2)
    expected = model.encode([text], convert_to_tensor=True)
    save_sentence_transformer(model, tmp_path / "tisa")
    again = SentenceTransformer(str(tmp_path / "tisa"), device="cpu")
    assert again.max_seq_length == model.max_seq_length
    torch.testing.assert_close(again.encode([text], convert_to_tensor=True), expected, rtol=0, atol=1e-6)
    card = (tmp_path / "tisa" / "README.md").read_text()
    if mode == "add":
        assert "it reads at most its rotary range's length." in card
        with pytest.raises(UsageError, match=rf"^max_seq_length {ROPE_RANGE + 1} is longer than the rotary range "):
            fresh = SentenceTransformer(str(folder), device="cpu")
            to_tisa_sentence_transformer(fresh, TisaConfig(**RANDOM), max_seq_length=ROPE_RANGE + 1)
    else:
        assert "reads inputs of any length" in card


def test_the_stock_model_extrapolates_and_tisa_add_does_the_same(rope_checkpoint):
    """Past the rotary range `add` refuses nothing the stock model reads (RoPE extrapolates)."""
    stock = AutoModel.from_pretrained(rope_checkpoint).eval()
    tisa = AutoModel.from_pretrained(rope_checkpoint, tisa=TisaConfig(init="zeros")).eval()
    input_ids = torch.randint(5, 99, (1, 2 * ROPE_RANGE))
    # NomicBERT before transformers 5.17 gathers the default token type ids by position from a buffer of the rotary
    # range's rows, so its stock model reads past the range only given them.
    takes_token_types = "token_type_ids" in signature(stock.forward).parameters
    given = {"token_type_ids": torch.zeros_like(input_ids)} if takes_token_types else {}
    with torch.no_grad():
        assert torch.equal(tisa(input_ids, **given).last_hidden_state, stock(input_ids, **given).last_hidden_state)


@EACH_SLOW_BUT_MODERNBERT
def test_patch_in_memory_matches_loading(rope_checkpoint):
    """`tisa_hf.patch` of a stock model in memory gives the class and kernels `from_pretrained(..., tisa=)` gives."""
    loaded = AutoModel.from_pretrained(rope_checkpoint, tisa=TisaConfig(mode="replace", fit_restarts=1))
    patched = tisa_hf.patch(AutoModel.from_pretrained(rope_checkpoint), TisaConfig(mode="replace", fit_restarts=1))
    assert type(patched) is type(loaded)
    assert torch.equal(patched.tisa.amplitude, loaded.tisa.amplitude)


@EACH_SLOW_BUT_MODERNBERT
@requires_extra("finetune")  # transformers' Trainer needs accelerate
def test_trainer_moves_the_kernels_and_the_saved_model_reloads(rope_checkpoint, tmp_path):
    from transformers import AutoModelForSequenceClassification

    task = FirstTokenTask(size=16, vocab_size=99, low=5)
    model = AutoModelForSequenceClassification.from_pretrained(rope_checkpoint, num_labels=2, tisa=TisaConfig(**RANDOM))
    start = model.base_model.tisa.amplitude.detach().clone()
    trainer = short_trainer(model, task, tmp_path / "trainer", max_steps=2)
    trainer.train()
    assert not torch.equal(model.base_model.tisa.amplitude.detach(), start)
    trainer.save_model(str(tmp_path / "saved"))
    reloaded = AutoModelForSequenceClassification.from_pretrained(tmp_path / "saved").eval()
    with torch.no_grad():
        inputs = task.inputs[:4]
        assert torch.equal(model.eval()(input_ids=inputs).logits, reloaded(input_ids=inputs).logits)


@requires_extra("st")
def test_a_multi_vector_encoder_of_a_rope_model_reads_past_its_rotary_range(rope_checkpoints, tmp_path):
    from sentence_transformers import MultiVectorEncoder, SentenceTransformer

    from tisa_hf.common.sentence_models import to_tisa_sentence_transformer
    from tisa_hf.multivector.encoder import save_multi_vector_encoder

    folder = tmp_path / "base"
    AutoModel.from_pretrained(rope_checkpoints["modernbert"]).save_pretrained(folder)
    write_tokenizer(folder)
    tisa = TisaConfig(mode="replace", **RANDOM)
    model = to_tisa_sentence_transformer(SentenceTransformer(str(folder), device="cpu"), tisa, max_seq_length=64)
    save_multi_vector_encoder(model, tmp_path / "multi", document_length=4 * ROPE_RANGE)
    encoder = MultiVectorEncoder(str(tmp_path / "multi"), device="cpu")
    vectors = encoder.encode_document([" ".join(WORDS)])[0]
    assert vectors.shape[0] == len(WORDS) and torch.isfinite(torch.as_tensor(vectors)).all()


@pytest.mark.parametrize("rope_model_type", rope_params())
def test_weights_a_checkpoint_lacks_start_as_the_stock_class_draws_them(rope_model_type):
    """Loading a TISA class without weights draws the encoder's and head's weights as the stock class does (ModernBERT's
    attention and MLP from their parent's truncated normal), seeded alike: the kernels aside, which TISA sets after
    transformers' initialisation."""
    stock_class = getattr(
        transformers, adapter_for(rope_model_type).base_model_class_name.replace("Model", "ForMaskedLM")
    )
    config = tiny_rope_config(rope_model_type)

    def loaded(model_class: type, config) -> dict[str, torch.Tensor]:
        with patch.object(PreTrainedModel, "_initialize_weights", seeded(PreTrainedModel._initialize_weights)):
            model = model_class.from_pretrained(None, config=config, state_dict={})
        return {name: value for name, value in model.state_dict().items() if ".tisa." not in name}

    stock = loaded(stock_class, config)
    tisa = loaded(tisa_model_class(stock_class), tisa_hf.tisa_model_config(config, TisaConfig(**RANDOM)))
    assert stock.keys() == tisa.keys()
    assert all(torch.equal(stock[name], tisa[name]) for name in stock)


def seeded(initialize_weights):
    """transformers' `_initialize_weights`, the random stream restarted at each module: two loads draw alike."""

    def initialize(*args, **kwargs):
        torch.manual_seed(42)
        initialize_weights(*args, **kwargs)

    return initialize


@requires_extra("finetune")
def test_adapt_distills_a_rope_student_past_its_teachers_rotary_range(rope_checkpoints, tmp_path):
    """`tisa-hf adapt` on a ModernBERT base: the stock teacher reads the blocks past its rotary range in windows of
    that range, the `replace` student learns its kernels, and the adapted folder loads with them."""
    from safetensors.torch import load_file

    from tests.fixtures import write_wikitext
    from tisa_hf.adapt import adapt_task
    from tisa_hf.adapt.arguments import ADAPT_ARGUMENTS
    from tisa_hf.finetune.arguments import parse_arguments

    base = tmp_path / "base"
    AutoModel.from_pretrained(rope_checkpoints["modernbert"]).save_pretrained(base)
    write_tokenizer(base)
    argv = [
        "--model", str(base), "--train-text", str(write_wikitext(tmp_path / "text.txt")), "--output-dir",
        str(tmp_path / "adapted"), "--lengths", str(ROPE_RANGE), str(3 * ROPE_RANGE), "--max-steps", "2",
        "--train-batch-size", "2", "--eval-batch-size", "4", "--tisa.num_kernels", "2", "--tisa.init", "random",
        "--no-tracking", "--checkpoint-steps", "0",
    ]  # fmt: skip
    record = adapt_task.run(*parse_arguments(ADAPT_ARGUMENTS, argv, prog="test"))
    assert record["adaptation"]["teacher_table"] == ROPE_RANGE
    assert [stage["length"] for stage in record["adaptation"]["curriculum"]] == [ROPE_RANGE, 3 * ROPE_RANGE]
    adapted = AutoModel.from_pretrained(tmp_path / "adapted")
    assert tisa_hf.tisa_config_of(adapted).mode == "replace"
    start = AutoModel.from_pretrained(base, tisa=TisaConfig(mode="replace", **RANDOM)).tisa.amplitude.detach()
    assert not torch.equal(load_file(tmp_path / "adapted" / "model.safetensors")["tisa.amplitude"], start)
