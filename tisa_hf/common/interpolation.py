"""Linear position interpolation: the peer baseline for inputs longer than a model's position table.

`interp:MODEL` (in `tisa-hf lm-eval`) is MODEL with its position table stretched to the input length n:
position p reads the table of T rows at x = p * T / n (the m * L / L' mapping of position interpolation, Chen et
al. 2023, which LongEmbed and E5-Base-4k apply to absolute position embeddings), linearly between rows floor(x)
and floor(x) + 1 (the last row is held past the end). At n <= T the scale is 1 and every row is the original
one exactly, so the model is the original model.
"""

from __future__ import annotations

import torch
from torch import nn
from transformers import PreTrainedModel

from ..adapters import find_base_model
from ..patching import tisa_config_of


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
