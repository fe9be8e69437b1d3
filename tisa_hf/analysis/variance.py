"""Latent position in the variance of the attention output (Chi et al. 2023, "Latent positional information
is in the self-attention variance of transformer language models without positional embeddings").

The encoder is stripped of position information (every position embedding replaced by their mean, no TISA
bias, i.e. `mode="replace"`, S=0), fed random tokens, and the first layer's attention output softmax(QK^T/√d)V
is computed with and without a causal mask. Without a mask its variance is the same at every position; with
one, query i averages i values, so the variance shrinks roughly like 1/i: a position signal the model can
read even without position embeddings.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from transformers import PreTrainedModel

from ..adapters import find_base_model


@dataclass
class VarianceProfile:
    """Variance of the attention output at positions 1 .. n (over inputs and hidden units), and the slopes of
    log variance against log position."""

    positions: torch.Tensor
    bidirectional: torch.Tensor
    causal: torch.Tensor

    @property
    def bidirectional_slope(self) -> float:
        return log_log_slope(self.positions, self.bidirectional)

    @property
    def causal_slope(self) -> float:
        return log_log_slope(self.positions, self.causal)


def log_log_slope(positions: torch.Tensor, values: torch.Tensor) -> float:
    """Least-squares slope of log(values) against log(positions)."""
    return float(np.polyfit(np.log(positions.double().numpy()), np.log(values.double().numpy()), 1)[0])


def position_free_inputs(model: PreTrainedModel, input_ids: torch.Tensor) -> torch.Tensor:
    """What the first attention layer sees for `input_ids` when every position embedding is their mean."""
    base, adapter = find_base_model(model)
    words = adapter.embeddings(base).word_embeddings(input_ids)
    return adapter.encoder_input(base, adapter.embedding_output(base, words, adapter.position_rows(base).mean(0)))


def first_layer_attention_output(model: PreTrainedModel, hidden: torch.Tensor, causal: bool) -> torch.Tensor:
    """softmax(QK^T/√d_k + mask)V of the first self-attention layer, heads concatenated: (batch, n, hidden).

    Computed from the layer's query, key and value projections, since the point is to add a causal mask
    that the encoder's own attention does not take.
    """
    base, adapter = find_base_model(model)
    projections = adapter.projections(adapter.attention_sites(base)[0].module)
    heads = base.config.num_attention_heads

    def split(x: torch.Tensor) -> torch.Tensor:
        return x.unflatten(-1, (heads, -1)).transpose(1, 2)

    query, key, value = (split(projection(hidden)) for projection in projections)
    logits = query @ key.transpose(-1, -2) / query.shape[-1] ** 0.5
    if causal:
        length = hidden.shape[1]
        future = torch.ones(length, length, dtype=torch.bool, device=hidden.device).triu(1)
        logits = logits.masked_fill(future, float("-inf"))
    return (logits.softmax(-1) @ value).transpose(1, 2).flatten(2)


@torch.no_grad()
def attention_output_variance(
    model: PreTrainedModel, length: int, batch_size: int = 16, seed: int = 0
) -> VarianceProfile:
    """Variance of the position-free first-layer attention output per position, over `batch_size` random
    token sequences and the hidden units, bidirectional and causal."""
    generator = torch.Generator().manual_seed(seed)
    device = next(model.parameters()).device
    input_ids = torch.randint(model.config.vocab_size, (batch_size, length), generator=generator).to(device)
    hidden = position_free_inputs(model, input_ids)

    def variance(causal: bool) -> torch.Tensor:
        output = first_layer_attention_output(model, hidden, causal).double()
        return output.var(0).mean(-1).float().cpu()

    return VarianceProfile(positions=torch.arange(1, length + 1), bidirectional=variance(False), causal=variance(True))
