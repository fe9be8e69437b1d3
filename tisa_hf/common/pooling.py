"""Chunk-and-average, the reading of a document longer than a model's position table that `tisa-hf longembed`
compares (`chunk:MODEL`) and that `tisa-hf adapt --objective embed` takes as its teacher's embedding of a block
the teacher cannot read whole: one home, so that the adaptation's target is the baseline it is measured against.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F


def chunks_of(document: list[int], size: int) -> list[list[int]]:
    """`[CLS] chunk [SEP]` sequences of at most `size` tokens covering the document's tokens between its own
    [CLS] and [SEP] in order (the last chunk may be shorter)."""
    first, body, last = document[0], document[1:-1], document[-1]
    step = size - 2
    return [[first, *body[start : start + step], last] for start in range(0, len(body), step)]


def chunk_average(
    embed: Callable[..., torch.Tensor], documents: list[list[int]], size: int, progress: str | None = None
) -> torch.Tensor:
    """Per document, the normalised mean of its chunks' (normalised) embeddings; `embed` embeds sequences."""
    chunked = [chunks_of(document, size) for document in documents]
    flat = embed([chunk for chunks in chunked for chunk in chunks], progress)
    means, start = [], 0
    for chunks in chunked:
        means.append(flat[start : start + len(chunks)].mean(0))
        start += len(chunks)
    return F.normalize(torch.stack(means), dim=-1)


def window_means(states: torch.Tensor, step: int) -> torch.Tensor:
    """(windows, dim) normalised means of `states` (tokens, dim) over consecutive windows of `step` tokens, the last
    one shorter: a window's vector pooled from a whole read's token states (late chunking, Günther et al., 2024), in
    one home for the read-outs that measure it and the training that rewards it (`tisa-hf context-train`)."""
    return F.normalize(torch.stack([window.mean(0) for window in states.split(step)]), dim=-1)
