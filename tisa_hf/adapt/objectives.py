"""The adaptation objectives as modules whose forward returns the loss (what the training loop calls).

`DistillationObjective`: the patched student's hidden states against those of the unpatched teacher on the
same blocks; blocks longer than the teacher's table (replace mode) against the teacher's states read in
overlapping windows (`windowed_teacher.py`), body tokens only. The default distance is the cosine one,
1 - cos(h_student, h_teacher) per token:
- it is the agreement `tisa-hf lm-eval` reports, so training optimises what is measured;
- BERT-family hidden states have a few outlier dimensions far larger than the rest, which dominate a squared
  error, whereas the cosine weighs the direction of the whole vector;
- its scale is the same in every layer, so `--distill-layers all` averages layers without per-layer weights.
`mse` (mean squared error per element) is offered for when the norms matter too, e.g. for a downstream head that
reads unnormalised features; with `--train kernels` the LayerNorms are frozen, so norms can barely drift anyway.

`EmbeddingObjective` (`--objective embed`): the student's mean-pooled embedding of each block against the teacher's,
1 - cosine per block, for embedding use beyond the teacher's table: a block the teacher reads whole has its
embedding as the target; a longer one the teacher's chunk-average (`tisa_hf.common.long_inputs`, the
`chunk:MODEL` reading `tisa-hf longembed` compares), so the student learns to embed a long block as well as the
best the teacher can do with it, from one forward over the whole block. Token-state distillation may be added
with a weight, on the blocks the teacher reads whole (it has no token states for the others). So may a contrastive
term for retrieval inside long blocks: a span of each block, as a query of its own, must find its block among the
micro-batch's (`span_retrieval_losses`), which asks every part of a block to stay visible in its one embedding,
whatever the block's length; no teacher is needed for it.

`MaskedLMObjective`: masked-token cross-entropy with logits only at the masked positions: the masked hidden
states are gathered and only they go through the MLM head, never (positions x vocabulary) logits.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import partial
from typing import Literal

import torch
import torch.nn.functional as F
from torch import nn
from transformers import (
    AutoModelForMaskedLM,
    DataCollatorForLanguageModeling,
    PreTrainedConfig,
    PreTrainedModel,
    PreTrainedTokenizerBase,
)
from transformers.utils import ModelOutput

from ..common.long_inputs import chunk_average
from ..common.text import special_tokens_mask
from ..errors import UsageError
from ..model_configs import plain_model_config
from .windowed_teacher import windowed_states

DistillLoss = Literal["cosine", "mse"]
DistillLayers = Literal["last", "all"]
IGNORE_INDEX = -100


@dataclass
class ObjectiveOutput(ModelOutput):
    """`loss` to minimise, and per sequence the summed token losses and their count (for exact eval means).

    A `ModelOutput`, so that DDP and Accelerate's autocast treat it as they treat any transformers output."""

    loss: torch.Tensor | None = None
    sums: torch.Tensor | None = None
    counts: torch.Tensor | None = None


def mlm_head_of(model: PreTrainedModel) -> nn.Module:
    """The MLM head of a `*ForMaskedLM` model: its one child module besides the encoder (BERT's `cls`, RoBERTa's
    and XLM-RoBERTa's `lm_head`, ALBERT's `predictions`), which maps hidden states (..., hidden) to logits
    (..., vocabulary). ELECTRA's and DistilBERT's heads are spread over several modules and are refused."""
    heads = {name: module for name, module in model.named_children() if module is not model.base_model}
    if model.base_model is model or len(heads) != 1:
        found = ", ".join(heads) or "none"
        raise UsageError(
            f"{type(model).__name__} has no MLM head in one module (modules besides the encoder: {found}); the "
            "masked-LM objective and measure take heads like BERT's, RoBERTa's and ALBERT's. Use distillation."
        )
    return next(iter(heads.values()))


def token_distances(student: torch.Tensor, teacher: torch.Tensor, loss: DistillLoss) -> torch.Tensor:
    """(batch, length) distances between hidden states (batch, length, hidden), computed in float32."""
    student, teacher = student.float(), teacher.float()
    if loss == "cosine":
        return 1 - F.cosine_similarity(student, teacher, dim=-1)
    return (student - teacher).square().mean(-1)


def masked_token_losses(
    hidden_states: torch.Tensor, head: nn.Module, labels: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Cross-entropy at each masked position (labels != -100), from logits of those positions only.

    Returns (per sequence summed loss, per sequence masked count); their ratio over all sequences equals
    transformers' full-logit MLM loss.
    """
    masked = labels != IGNORE_INDEX
    logits = head(hidden_states[masked])
    losses = F.cross_entropy(logits.float(), labels[masked], reduction="none")
    sequence = masked.nonzero()[:, 0]
    sums = torch.zeros(labels.shape[0], device=losses.device, dtype=losses.dtype).index_add_(0, sequence, losses)
    return sums, masked.sum(-1)


class DistillationObjective(nn.Module):
    """The hidden states of `model` (the student) against the teacher's: the last layer's, or every layer's
    (embeddings excluded: in `replace` mode the student's embedding output lacks the position vectors by design).
    A block longer than `table`, the teacher's position table, is compared on its body tokens with the teacher's
    windowed states.

    The teacher is deliberately not a submodule: it stays frozen and in eval mode whatever `train()` is called,
    is never checkpointed (it is rebuilt from the same pretrained weights) and is invisible to DDP.
    """

    def __init__(
        self, model: PreTrainedModel, teacher: PreTrainedModel, table: int, layers: DistillLayers, loss: DistillLoss
    ):
        super().__init__()
        self.model = model
        self._teacher = (teacher.eval().requires_grad_(False),)
        self.table = table
        self.layers = layers
        self.loss = loss

    @property
    def teacher(self) -> PreTrainedModel:
        return self._teacher[0]

    def _states(self, model: PreTrainedModel, input_ids: torch.Tensor) -> tuple[torch.Tensor, ...]:
        output = model.base_model(input_ids=input_ids, output_hidden_states=self.layers == "all")
        return output.hidden_states[1:] if self.layers == "all" else (output.last_hidden_state,)

    def forward(self, input_ids: torch.Tensor) -> ObjectiveOutput:
        windowed = input_ids.shape[1] > self.table
        with torch.no_grad():
            if windowed:
                targets = windowed_states(partial(self._states, self.teacher), input_ids, self.table)
            else:
                targets = self._states(self.teacher, input_ids)
        states = self._states(self.model, input_ids)
        if windowed:  # the body tokens: [CLS] and [SEP] have no windowed target
            states = tuple(state[:, 1:-1] for state in states)
        distances = torch.stack(
            [token_distances(state, target, self.loss) for state, target in zip(states, targets, strict=True)]
        ).mean(0)
        counts = torch.full((input_ids.shape[0],), distances.shape[1], device=input_ids.device)
        return ObjectiveOutput(loss=distances.mean(), sums=distances.sum(-1), counts=counts)


def mean_embeddings(states: torch.Tensor) -> torch.Tensor:
    """(batch, hidden) normalised means over every token of (batch, length, hidden) states, in float32: the
    embedding of a mean-pooling sentence-transformers model of unpadded blocks."""
    return F.normalize(states.float().mean(1), dim=-1)


SPAN_RETRIEVAL_SCALE = 20.0  # sentence-transformers' MultipleNegativesRankingLoss default (temperature 0.05)
EVAL_SPAN_SEED = 0


def span_queries(blocks: torch.Tensor, span_tokens: int, generator: torch.Generator | None) -> torch.Tensor:
    """(batch, span_tokens + 2) queries: `span_tokens` consecutive tokens from a random place inside each block's
    body, between the block's own first and last tokens ([CLS] and [SEP] of a packed block)."""
    body = blocks.shape[1] - 2
    starts = 1 + torch.randint(body - span_tokens + 1, (blocks.shape[0],), generator=generator)
    columns = starts[:, None] + torch.arange(span_tokens)
    spans = blocks.gather(1, columns.to(blocks.device))
    return torch.cat([blocks[:, :1], spans, blocks[:, -1:]], dim=1)


def span_retrieval_losses(queries: torch.Tensor, documents: torch.Tensor) -> torch.Tensor:
    """Per query, the cross-entropy of finding its own document (the same row) among all `documents` by the
    scaled cosine of normalised embeddings: MultipleNegativesRankingLoss's in-batch ranking, written here
    because sentence-transformers' loss runs its own model forward, and these embeddings come out of the
    adaptation's forward."""
    scores = SPAN_RETRIEVAL_SCALE * queries @ documents.T
    return F.cross_entropy(scores, torch.arange(len(queries), device=scores.device), reduction="none")


class EmbeddingObjective(DistillationObjective):
    """1 - cosine between the student's and the teacher's embeddings per block (see the module docstring), plus
    `token_weight` times the token-state distillation (`layers`, `loss`) on blocks of at most `table` tokens, the
    teacher's table; longer blocks take the chunk-average of `table`-token chunks as the teacher's embedding.
    Plus `span_weight` times the span-retrieval loss of `span_tokens`-token spans: in training their places come
    from the global RNG, checkpointed with the step, and in evaluation from a fixed seed (the same spans at every
    evaluation, and the training draws untouched)."""

    def __init__(
        self,
        model: PreTrainedModel,
        teacher: PreTrainedModel,
        table: int,
        token_weight: float = 0.0,
        layers: DistillLayers = "last",
        loss: DistillLoss = "cosine",
        span_weight: float = 0.0,
        span_tokens: int = 32,
    ):
        super().__init__(model, teacher, table, layers if token_weight else "last", loss)
        self.token_weight = token_weight
        self.span_weight = span_weight
        self.span_tokens = span_tokens

    @torch.no_grad()
    def _teacher_embed(self, sequences: list[list[int]], progress: str | None = None) -> torch.Tensor:
        """Normalised teacher embeddings of token-id sequences, batched by length (chunks need no padding)."""
        device = next(self.teacher.parameters()).device
        embeddings = torch.empty(len(sequences), self.teacher.config.hidden_size, device=device)
        for length in {len(sequence) for sequence in sequences}:
            rows = [index for index, sequence in enumerate(sequences) if len(sequence) == length]
            input_ids = torch.tensor([sequences[index] for index in rows], device=device)
            embeddings[rows] = mean_embeddings(self.teacher.base_model(input_ids=input_ids).last_hidden_state)
        return embeddings

    def forward(self, input_ids: torch.Tensor) -> ObjectiveOutput:
        whole = input_ids.shape[1] <= self.table
        with torch.no_grad():
            if whole:
                targets = self._states(self.teacher, input_ids)
                target = mean_embeddings(targets[-1])
            else:
                target = chunk_average(self._teacher_embed, input_ids.tolist(), self.table)
        states = self._states(self.model, input_ids)
        embeddings = mean_embeddings(states[-1])
        losses = 1 - F.cosine_similarity(embeddings, target, dim=-1)
        if self.token_weight and whole:
            distances = torch.stack(
                [token_distances(state, goal, self.loss) for state, goal in zip(states, targets, strict=True)]
            )
            losses = losses + self.token_weight * distances.mean((0, 2))
        if self.span_weight:
            generator = None if self.training else torch.Generator().manual_seed(EVAL_SPAN_SEED)
            queries = span_queries(input_ids, self.span_tokens, generator)
            query_embeddings = mean_embeddings(self.model.base_model(input_ids=queries).last_hidden_state)
            losses = losses + self.span_weight * span_retrieval_losses(query_embeddings, embeddings)
        return ObjectiveOutput(loss=losses.mean(), sums=losses, counts=torch.ones_like(losses))


class MaskedLMObjective(nn.Module):
    """Masked-token loss of a `*ForMaskedLM` model.

    Without `labels` (training), the blocks are masked here, inside the step, by `DataCollatorForLanguageModeling`'s
    masking from the global RNG, not by the data loader: Accelerate's loader fetches one batch ahead, so masks
    drawn there would not be reproduced by `--resume`, whereas the global RNG is checkpointed with the step.
    Masking runs on the CPU (where the collator draws) and the result moves to the model's device.
    """

    def __init__(self, model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, mlm_probability: float = 0.15):
        super().__init__()
        self.model = model
        mlm_head_of(model)  # fails early for a model without one
        self.tokenizer = tokenizer
        self.collator = DataCollatorForLanguageModeling(tokenizer, mlm_probability=mlm_probability)

    @property
    def head(self) -> nn.Module:
        """The model's own head, looked up rather than registered twice (one parameter, one checkpoint key)."""
        return mlm_head_of(self.model)

    def mask(self, input_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        ids = input_ids.cpu()
        masked, labels = self.collator.torch_mask_tokens(ids.clone(), special_tokens_mask(ids, self.tokenizer))
        return masked.to(input_ids.device), labels.to(input_ids.device)

    def forward(self, input_ids: torch.Tensor, labels: torch.Tensor | None = None) -> ObjectiveOutput:
        if labels is None:
            input_ids, labels = self.mask(input_ids)
        hidden_states = self.model.base_model(input_ids=input_ids).last_hidden_state
        sums, counts = masked_token_losses(hidden_states, self.head, labels)
        return ObjectiveOutput(loss=sums.sum() / counts.sum(), sums=sums, counts=counts)


def check_mlm_head_module(config: PreTrainedConfig) -> None:
    """A ValueError, before any weights load, if the architecture's MLM head is not one module."""
    with torch.device("meta"):
        mlm_head_of(AutoModelForMaskedLM.from_config(plain_model_config(config)))
