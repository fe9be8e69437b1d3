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
    """Positions of the profiles when no length is asked for: the positions the encoder was built for (its table's
    rows for real tokens, or its rotary range), at most `DEFAULT_PROFILE_LENGTH`."""
    base, adapter = find_base_model(model)
    return min(adapter.positions.trained_length(base, adapter), DEFAULT_PROFILE_LENGTH)


@torch.no_grad()
def extract_positional_profiles(
    model: PreTrainedModel, length: int | None = None, input_ids: torch.Tensor | None = None
) -> PositionalProfiles:
    """F̂_P of every layer and head, and its best Toeplitz approximation, read without TISA and in eval mode.

    With a position table, the logits of the mean word at each position (`adapters.positions.PositionTable`); with
    rotary embeddings, the rotary part of the logits of text: `input_ids` (batch, n), the user's own tokenized text,
    or by default a fixed sample of the vocabulary (`adapters.positions.RotaryPositions`).
    """
    base, adapter = find_base_model(model)
    length = length or (input_ids.shape[1] if input_ids is not None else default_profile_length(base))
    was_training = base.training
    base.eval()
    try:
        with tisa_disabled(base):
            logits = adapter.positions.positional_logits(base, adapter, length, input_ids)
    finally:
        base.train(was_training)
    return PositionalProfiles(logits=logits, toeplitz=toeplitz_fit(logits))
