"""Positional attention profiles F̂_P of a pretrained encoder (the TISA paper's section 3.2 and appendix C)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass

import torch
from torch import nn
from transformers import PreTrainedModel

from .adapters import find_base_model
from .kernels import TisaPositionBias
from .toeplitz import ToeplitzFit, toeplitz_fit

DEFAULT_PROFILE_LENGTH = 512


@dataclass
class PositionalProfiles:
    """`logits[l, h, i, j]`: query-key logit between positions i and j when every word is the mean word."""

    logits: torch.Tensor
    toeplitz: ToeplitzFit

    @property
    def length(self) -> int:
        return self.logits.shape[-1]


@contextlib.contextmanager
def tisa_disabled(model: nn.Module) -> Iterator[None]:
    """Runs a model without its TISA bias (the kernels stay as they are)."""
    modules = [m for m in model.modules() if isinstance(m, TisaPositionBias)]
    states = [m.enabled for m in modules]
    for module in modules:
        module.enabled = False
    try:
        yield
    finally:
        for module, state in zip(modules, states, strict=True):
            module.enabled = state


def default_profile_length(model: PreTrainedModel) -> int:
    """Positions of the profiles when no length is asked for: the rows of the position table real tokens use, at
    most `DEFAULT_PROFILE_LENGTH`."""
    base, adapter = find_base_model(model)
    return min(adapter.position_rows(base).shape[0], DEFAULT_PROFILE_LENGTH)


@torch.no_grad()
def extract_positional_profiles(model: PreTrainedModel, length: int | None = None) -> PositionalProfiles:
    """F̂_P of every layer and head, and its best Toeplitz approximation.

    Every word embedding is replaced by the mean word embedding over the vocabulary; position embeddings
    (of the rows real tokens use) and token type 0 are added, the result passes the model's own embedding
    LayerNorm, and the encoder runs on it (after the model's own projection, where it has one) without TISA.
    Each layer's `q_i·k_j/sqrt(d_k)` is read from its query and key projections, biases included.
    """
    base, adapter = find_base_model(model)
    rows = adapter.position_rows(base)
    available = rows.shape[0]
    length = length or default_profile_length(base)
    if length > available:
        raise ValueError(f"Profiles of {length} positions were asked for, but the position table holds {available}.")
    mean_word = adapter.embeddings(base).word_embeddings.weight.mean(0)
    hidden = adapter.embedding_output(base, mean_word, rows[:length])[None]

    queries: list[torch.Tensor] = []
    keys: list[torch.Tensor] = []
    sites = adapter.attention_sites(base)
    handles = []
    for module in {id(site.module): site.module for site in sites}.values():
        query, key, _ = adapter.projections(module)
        handles.append(query.register_forward_hook(lambda _m, _i, out: queries.append(out[0].float())))
        handles.append(key.register_forward_hook(lambda _m, _i, out: keys.append(out[0].float())))
    was_training = base.training
    base.eval()
    try:
        with tisa_disabled(base):
            adapter.run_encoder(base, hidden)
    finally:
        base.train(was_training)
        for handle in handles:
            handle.remove()

    heads = base.config.num_attention_heads
    query = torch.stack(queries).unflatten(-1, (heads, -1)).transpose(1, 2)
    key = torch.stack(keys).unflatten(-1, (heads, -1)).transpose(1, 2)
    logits = query @ key.transpose(-1, -2) / query.shape[-1] ** 0.5
    return PositionalProfiles(logits=logits, toeplitz=toeplitz_fit(logits))
