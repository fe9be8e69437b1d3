"""Attention read from the model: identical-word probing (Wang et al. 2021, section 4) and t-offset trace
vectors on real text (Yamamoto and Matsuzaki 2023)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..common.saved_files import read_text
from ..errors import UsageError
from .encoder_loading import use_eager_attention
from .indicators import (
    LOCAL_OFFSETS,
    average_in_group_variance,
    direction_balance,
    offset_traces,
    ordered_pair_ratio,
    symmetric_discrepancy,
)

DEFAULT_TEXTS = (
    "The quick brown fox jumps over the lazy dog while the farmer watches from the porch of his old house.",
    "Scientists have discovered a new species of frog in the rain forests of Central America, "
    "and they believe many more remain to be found.",
    "After the meeting ended, she walked to the station, bought a ticket and took the last train home.",
    "The committee will publish its report next month, once every member has had a chance to read the draft.",
    "Music was playing in the small cafe on the corner, where students met every evening to talk about books.",
    "When the river flooded the valley in spring, the villagers moved their animals to the hills for safety.",
)


@dataclass
class ProbingResult:
    """First-layer attention on one repeated word, (H, n, n), and its indicators per head (H,)."""

    word: str
    attention: torch.Tensor
    exclude_special: bool
    aiv: torch.Tensor
    opr: torch.Tensor
    opr_local: torch.Tensor
    sd: torch.Tensor
    db: torch.Tensor


def special_ids(tokenizer: PreTrainedTokenizerBase) -> tuple[int, int]:
    """The ids that open and close a sequence ([CLS]/[SEP], <s>/</s>)."""
    first = tokenizer.cls_token_id if tokenizer.cls_token_id is not None else tokenizer.bos_token_id
    last = tokenizer.sep_token_id if tokenizer.sep_token_id is not None else tokenizer.eos_token_id
    if first is None or last is None:
        raise UsageError("The tokenizer has no [CLS]/[SEP] (or <s>/</s>) tokens to frame the probing sequence.")
    return first, last


def identical_word_ids(tokenizer: PreTrainedTokenizerBase, word: str, length: int) -> torch.Tensor:
    """(1, length) ids: the opening special token, `word` repeated, the closing special token."""
    pieces = tokenizer.tokenize(word)
    if len(pieces) != 1:
        raise UsageError(
            f"The probing word {word!r} splits into {len(pieces)} tokens {pieces}; choose a single-token word."
        )
    first, last = special_ids(tokenizer)
    word_id = tokenizer.convert_tokens_to_ids(pieces[0])
    return torch.tensor([[first] + [word_id] * (length - 2) + [last]])


@torch.no_grad()
def attention_probabilities(model: PreTrainedModel, input_ids: torch.Tensor) -> torch.Tensor:
    """(layers, heads, n, n) attention probabilities of one sequence."""
    use_eager_attention(model)
    output = model(input_ids=input_ids, attention_mask=torch.ones_like(input_ids), output_attentions=True)
    return torch.stack([layer[0] for layer in output.attentions]).float()


def probe_identical_words(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    length: int,
    word: str = "the",
    exclude_special: bool = True,
    local_offsets: int = LOCAL_OFFSETS,
) -> ProbingResult:
    """Identical-word probing: one word repeated, the first layer's attention per head, and the indicators
    AIV, OPR (all offsets and within `local_offsets`), SD and DB (within `local_offsets`). With
    `exclude_special` the rows and columns of the framing special tokens are left out, as in the paper."""
    attention = attention_probabilities(model, identical_word_ids(tokenizer, word, length))[0]
    measured = attention[:, 1:-1, 1:-1] if exclude_special else attention
    return ProbingResult(
        word=word,
        attention=attention,
        exclude_special=exclude_special,
        aiv=average_in_group_variance(measured).float(),
        opr=ordered_pair_ratio(measured).float(),
        opr_local=ordered_pair_ratio(measured, local_offsets).float(),
        sd=symmetric_discrepancy(measured),
        db=direction_balance(measured, local_offsets),
    )


def read_texts(path: str | Path) -> list[str]:
    """One text per non-empty line of a UTF-8 file."""
    texts = [line.strip() for line in read_text(path).splitlines() if line.strip()]
    if not texts:
        raise UsageError(f"Text file {path} holds no text; put one sentence or paragraph per line.")
    return texts


@torch.no_grad()
def trace_vectors(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    texts: Sequence[str] = DEFAULT_TEXTS,
    max_length: int = 512,
    max_offset: int = 10,
) -> torch.Tensor:
    """(layers, heads, 2 max_offset + 1): [tr_-w(A) .. tr_w(A)] of each head, averaged over the texts."""
    traces = []
    for text in texts:
        input_ids = tokenizer(text, truncation=True, max_length=max_length, return_tensors="pt")["input_ids"]
        traces.append(offset_traces(attention_probabilities(model, input_ids), max_offset))
    return torch.stack(traces).mean(0)


def head_directions(traces: torch.Tensor) -> list[list[str]]:
    """'left', 'self' or 'right' per layer and head: where its largest t-offset trace lies."""
    max_offset = (traces.shape[-1] - 1) // 2
    peak = traces.argmax(-1) - max_offset
    return [["left" if t < 0 else "right" if t > 0 else "self" for t in row] for row in peak.tolist()]
