"""The two peer baselines for inputs longer than a model's position table: linear position interpolation and
chunk-and-average.

`interp:MODEL` (in `tisa-hf lm-eval`) is MODEL with its position table stretched to the input length n:
position p reads the table of T rows at x = p * T / n (the m * L / L' mapping of position interpolation, Chen et
al. 2023, which LongEmbed and E5-Base-4k apply to absolute position embeddings), linearly between rows floor(x)
and floor(x) + 1 (the last row is held past the end). At n <= T the scale is 1 and every row is the original
one exactly, so the model is the original model.

Chunk-and-average (`chunk:MODEL`, which `tisa-hf longembed` and the other retrieval commands compare) embeds a
document in chunks the table covers and averages them; `tisa-hf adapt --objective embed` takes it as its teacher's
embedding of a block the teacher cannot read whole: one home, so that the adaptation's target is the baseline it is
measured against.
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F
from torch import nn
from transformers import PreTrainedModel

from ..adapters import find_base_model
from ..attaching import tisa_config_of


def interpolated_rows(table: torch.Tensor, length: int) -> torch.Tensor:
    """(max(length, T), width) rows: row p interpolates `table` at x = p * T / max(length, T).

    Written out because `torch.nn.functional.interpolate` maps p to (p + 0.5) T / n - 0.5 or p (T - 1) / (n - 1)
    (its corner conventions), not to position interpolation's p T / n."""
    rows = table.shape[0]
    count = max(length, rows)
    position = torch.arange(count, dtype=torch.float64, device=table.device) * rows / count
    low = position.floor().long()
    weight = (position - low).to(table.dtype)[:, None]
    return torch.lerp(table[low], table[(low + 1).clamp(max=rows - 1)], weight)


class PositionInterpolation:
    """An unpatched model whose position table `stretch_to(n)` rebuilds for inputs of n tokens."""

    def __init__(self, model: PreTrainedModel):
        if tisa_config_of(model) is not None:
            raise ValueError("Position interpolation stretches a position table; give it the unpatched model.")
        base, adapter = find_base_model(model)
        self.model = model
        self.embeddings = adapter.embeddings(base)
        self.table = adapter.position_table(base)
        self.row_offset = adapter.position_row_offset(base)
        self.original = self.table.weight.detach().clone()

    @property
    def table_length(self) -> int:
        return self.original.shape[0] - self.row_offset

    def stretch_to(self, length: int) -> PreTrainedModel:
        """The model with a table of max(length, T) positions (rows before the offset, e.g. RoBERTa's padding
        rows, are kept); the embeddings' default position and token-type id buffers are extended to match."""
        kept, positions = self.original[: self.row_offset], self.original[self.row_offset :]
        rows = torch.cat([kept, interpolated_rows(positions, length)])
        self.table.weight = nn.Parameter(rows, requires_grad=False)
        self.table.num_embeddings = count = rows.shape[0]
        buffers = self.embeddings._buffers
        if "position_ids" in buffers:
            buffers["position_ids"] = torch.arange(count, device=rows.device).expand(1, -1)
        if "token_type_ids" in buffers:
            buffers["token_type_ids"] = torch.zeros(1, count, dtype=torch.long, device=rows.device)
        return self.model


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
