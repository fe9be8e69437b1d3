"""The models `tisa-hf bench` and its `--profile` measure, and the step each runs: a BERT-base shape (BERT, or a RoPE
encoder at BERT base's size), plain or with TISA, for a training or an inference step; for `long`, the packaged
MiniLM with TISA replace S=5, with position interpolation, or reading 512-token chunks."""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from dataclasses import dataclass

import torch
import transformers
from torch.nn.attention import SDPBackend, sdpa_kernel
from transformers import AutoConfig, AutoModel, BertConfig, PretrainedConfig
from transformers.models.auto.modeling_auto import (
    MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES,
    MODEL_MAPPING_NAMES,
)

from ..attention import BANDED, DEFAULT_SDPA_POLICY, FUSED_SDPA_POLICY, SDPA_POLICY_KWARG
from ..common.long_inputs import PositionInterpolation
from ..config import TisaConfig
from ..packaged import minilm_path
from ..patching import patch

TISA_KERNELS = 5
# `--sdpa-backend`: the backend a step is held to. "efficient" is what a Turing GPU (an RTX 2080, sm_75) runs TISA's
# bias on in fp16 and fp32: it has no bf16, no FlashAttention-2 and no cuDNN attention.
SDPA_BACKENDS = {"efficient": SDPBackend.EFFICIENT_ATTENTION, "math": SDPBackend.MATH}
# The sections that time a training step (forward, backward, AdamW) rather than an inference step, and those whose
# inputs run past the 512-position table (TISA in replace mode against the table enlarged to the length).
TRAINING_SECTIONS = ("train", "replace-train")
REPLACE_SECTIONS = ("replace", "replace-train")
CHUNK_TOKENS = 510  # a chunk's tokens: with [CLS] and [SEP], the 512 positions of MiniLM's table


@dataclass(frozen=True)
class ModelCase:
    """One model configuration whose time and memory the benchmark measures."""

    section: str  # "train", "infer", "replace", "replace-train" or "long"
    implementation: str  # an attention implementation, or "fused": sdpa, TISA on the fused kernel's route
    batch: int
    length: int
    tisa: bool
    dtype: str
    device: str
    dropout: float
    model: str | None = None  # long: the saved TISA model whose kernels are read (None: fitted ones)
    banded: bool = True  # long: whether TISA may take the banded route (False: the blockwise route before it)
    chunked: bool = False  # long: the original model reading the input as 512-token chunks (chunk-and-average)
    compile_backend: str | None = None  # not long: the model run through torch.compile with this backend
    sdpa_backend: str | None = None  # the only SDPA backend PyTorch may pick ("efficient": a Turing GPU's), or any
    layers: int = 12  # train, infer, replace, replace-train: the BERT-base-shaped model's layers
    architecture: str = "bert"  # train, infer, replace, replace-train: the encoder (a transformers model type)

    @property
    def training(self) -> bool:
        """Whether the case times a training step (forward, backward, AdamW) rather than an inference step."""
        return self.section in TRAINING_SECTIONS

    def label(self) -> str:
        model = self.section if self.architecture == "bert" else f"{self.section} {self.architecture}"
        label = f"{model} {self.implementation} {self.batch}x{self.length} {self.dtype}"
        if self.training:
            label += f" dropout {self.dropout:g}"
        if self.layers != BERT_BASE_SIZES["num_hidden_layers"] and self.section != "long":
            label += f" {self.layers} layers"
        if self.section == "long":
            label += f" {self.variant()}"
        if self.compile_backend is not None:
            label += f" compiled ({self.compile_backend})"
        if self.sdpa_backend is not None:
            label += f" {self.sdpa_backend} SDPA only"
        return label

    def variant(self) -> str:
        """`long`'s name of the model: plain, banded, blockwise or chunk."""
        if self.chunked:
            return "chunk"
        return "plain" if not self.tisa else "banded" if self.banded else "blockwise"


BERT_BASE_SIZES = {"num_hidden_layers": 12, "num_attention_heads": 12, "hidden_size": 768, "intermediate_size": 3072}


def attention_implementation(implementation: str) -> str:
    """The model's `attn_implementation` for a case's implementation (the fused route is sdpa's)."""
    return "sdpa" if implementation == "fused" else implementation


def bert_base_config(implementation: str, dropout: float, max_positions: int = 512) -> BertConfig:
    config = BertConfig(
        **BERT_BASE_SIZES,
        max_position_embeddings=max_positions,
        attention_probs_dropout_prob=dropout,
        num_labels=2,
        # what the classifier's first forward with labels would set, which a compiled model would recompile for
        problem_type="single_label_classification",
    )
    config._attn_implementation = attention_implementation(implementation)
    return config


# The RoPE encoders at BERT base's size, with BERT's vocabulary and padding id (GTE's default vocabulary has 250,048
# words, EuroBERT's 128,256: the optimizer's step over so large an embedding would thin every training ratio).
ROTARY_BASE_SIZES = {"num_attention_heads": 12, "hidden_size": 768, "vocab_size": 30522, "pad_token_id": 0}
# BERT's ids of the special tokens an architecture's config names, in place of its own, which lie outside BERT's
# vocabulary (transformers warns of them).
BERT_SPECIAL_TOKENS = {
    "bos_token_id": 101,
    "cls_token_id": 101,
    "eos_token_id": 102,
    "sep_token_id": 102,
    "mask_token_id": 103,
}
# Where each RoPE encoder's config keeps its attention dropout rate.
ATTENTION_DROPOUT_NAMES = {
    "modernbert": "attention_dropout",
    "nomic_bert": "attention_probs_dropout_prob",
    "gte": "attention_probs_dropout_prob",
    "eurobert": "attention_dropout",
}


def rotary_base_config(architecture: str, implementation: str, dropout: float, layers: int) -> PretrainedConfig:
    """A RoPE encoder's config at BERT base's size, its own defaults otherwise (ModernBERT's global layer every
    third, its 128-token local window, its gated MLP of width 1,152)."""
    defaults = AutoConfig.for_model(architecture)
    tokens = {name: token for name, token in BERT_SPECIAL_TOKENS.items() if getattr(defaults, name, None) is not None}
    config = AutoConfig.for_model(
        architecture,
        **ROTARY_BASE_SIZES,
        **tokens,
        num_hidden_layers=layers,
        num_labels=2,
        problem_type="single_label_classification",
    )
    setattr(config, ATTENTION_DROPOUT_NAMES[architecture], dropout)
    config._attn_implementation = attention_implementation(implementation)
    return config


def model_class(architecture: str, section: str) -> type[transformers.PreTrainedModel]:
    """The stock class a section times: the encoder alone for `replace`, else its sequence classifier."""
    table = MODEL_MAPPING_NAMES if section == "replace" else MODEL_FOR_SEQUENCE_CLASSIFICATION_MAPPING_NAMES
    return getattr(transformers, table[architecture])


def build_model(case: ModelCase, max_positions: int | None = None) -> torch.nn.Module:
    """The model of a case, with weights fixed by the seed (so variants of one case share them): for `replace`, the
    encoder alone, for `replace-train`, `train` and `infer`, a classifier."""
    torch.manual_seed(0)
    if case.section == "long":
        model = long_input_model(case)
    else:
        if case.architecture == "bert":
            config = bert_base_config(case.implementation, case.dropout, max_positions or 512)
            config.num_hidden_layers = case.layers
        else:
            config = rotary_base_config(case.architecture, case.implementation, case.dropout, case.layers)
        model = model_class(case.architecture, case.section)(config)
        if case.tisa:
            mode = "replace" if case.section in REPLACE_SECTIONS else "add"
            patch(model, TisaConfig(num_kernels=TISA_KERNELS, mode=mode, init="random"))
    model.to(case.device)
    model.train(case.training)
    return model


LONG_KERNELS = 5


def long_input_model(case: ModelCase) -> torch.nn.Module:
    """The packaged MiniLM for `long`: with TISA replace (S = 5, kernels fitted to its positional profiles, or read
    from the saved TISA model `case.model`), or plain with its position table stretched to the length by position
    interpolation."""
    if not case.tisa:
        model = AutoModel.from_pretrained(minilm_path(), attn_implementation=case.implementation)
        return model if case.chunked else PositionInterpolation(model).stretch_to(case.length)
    if case.model is not None:
        return AutoModel.from_pretrained(case.model, attn_implementation=case.implementation)
    tisa = TisaConfig(num_kernels=LONG_KERNELS, mode="replace")
    return AutoModel.from_pretrained(minilm_path(), tisa=tisa, attn_implementation=case.implementation)


def make_batch(case: ModelCase) -> dict[str, torch.Tensor]:
    """The case's inputs; a chunked case reads its length as full 512-token chunks in one batch (the last chunk of
    a real document is shorter, so this is the cost of at most 510 tokens more)."""
    generator = torch.Generator().manual_seed(1)
    shape = (case.batch, case.length)
    if case.chunked:
        shape = (case.batch * -(-case.length // CHUNK_TOKENS), CHUNK_TOKENS + 2)
    batch = {
        "input_ids": torch.randint(1000, 20000, shape, generator=generator),
        "attention_mask": torch.ones(shape, dtype=torch.long),
    }
    if case.training:
        batch["labels"] = torch.randint(0, 2, (case.batch,), generator=generator)
    return {name: tensor.to(case.device) for name, tensor in batch.items()}


def step_function(case: ModelCase, model: torch.nn.Module) -> Callable[[], None]:
    """One training step (forward, backward, AdamW; in fp16 through a GradScaler, as mixed-precision training runs it)
    or one no-grad forward, under autocast for bf16 and fp16; the model compiled where the case says (the optimizer
    step stays eager, as Trainer's and Accelerate's compile leave it), and PyTorch's SDPA held to one backend where
    the case names one."""
    batch = make_batch(case)
    if case.compile_backend is not None:
        model = torch.compile(model, backend=case.compile_backend)
    if case.section == "long" and not case.banded:
        batch[SDPA_POLICY_KWARG] = DEFAULT_SDPA_POLICY.without(BANDED)
    if case.implementation == "fused" and case.tisa:
        batch[SDPA_POLICY_KWARG] = FUSED_SDPA_POLICY
    device_type = torch.device(case.device).type
    dtype = getattr(torch, case.dtype)

    def context() -> contextlib.ExitStack:
        stack = contextlib.ExitStack()
        stack.enter_context(torch.autocast(device_type, dtype=dtype, enabled=case.dtype != "float32"))
        if case.sdpa_backend is not None:
            stack.enter_context(sdpa_kernel(SDPA_BACKENDS[case.sdpa_backend]))
        return stack

    if case.training:
        optimizer = torch.optim.AdamW(model.parameters(), lr=1e-5)
        scaler = torch.amp.GradScaler(device_type, enabled=case.dtype == "float16")

        def train_step() -> None:
            with context():
                loss = model(**batch).loss
            scaler.scale(loss).backward()
            scaler.step(optimizer)
            scaler.update()
            optimizer.zero_grad(set_to_none=True)

        return train_step

    def inference_step() -> None:
        with torch.no_grad(), context():
            model(**batch)

    return inference_step


def reference_positions(case: ModelCase) -> int | None:
    """The reference model of `replace` and `replace-train` has its position table enlarged to the input length (a
    RoPE encoder has none: its stock class rotates at any position)."""
    return case.length if case.section in REPLACE_SECTIONS and not case.tisa and case.architecture == "bert" else None


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)
