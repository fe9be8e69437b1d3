"""The teacher's token states of blocks longer than its position table, read in overlapping windows.

Distillation beyond the teacher's table (replace mode, `--lengths` past it) needs a target for every token of a
block the teacher cannot read whole. A block `[CLS] body [SEP]` of n tokens is read as windows
`[CLS] body[a : a + w] [SEP]` of the table's length (w = table - 2 body tokens), starting every w // 2 tokens, the
last flush with the body's end. Each body token's target is its state in the window whose centre is nearest (the
earlier window on a tie): the window giving it the most context on its poorer side, the rule transformers'
question-answering examples use to read long contexts with a document stride. The student, reading the whole block,
is then asked to keep each token's state what the teacher makes of its local context, at every length trained.
[CLS] and [SEP] have no target: the teacher's [CLS] of a window has read that window only, not the block.
"""

from __future__ import annotations

from collections.abc import Callable

import torch


def window_stride(table: int) -> int:
    """Body tokens between the starts of consecutive windows: half a window's body."""
    return max(1, (table - 2) // 2)


def window_starts(body: int, table: int) -> list[int]:
    """Starts of the windows (of table - 2 body tokens each) covering `body` > table - 2 body tokens."""
    width = table - 2
    return [*range(0, body - width, window_stride(table)), body - width]


def nearest_windows(body: int, table: int, device: torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Per body position, the index of its window (the nearest centre, the earlier on a tie) and its position
    within that window's body: two (body,) tensors."""
    starts = torch.tensor(window_starts(body, table), device=device)
    positions = torch.arange(body, device=device)
    centres = starts + (table - 3) / 2
    chosen = (positions[:, None] - centres[None, :]).abs().argmin(1)  # argmin returns the first of equal minima
    return chosen, positions - starts[chosen]


@torch.no_grad()
def windowed_states(
    states_of: Callable[[torch.Tensor], tuple[torch.Tensor, ...]], input_ids: torch.Tensor, table: int
) -> tuple[torch.Tensor, ...]:
    """Per layer that `states_of` returns (each (sequences, table, hidden) for (sequences, table) token ids), the
    teacher's (batch, n - 2, hidden) states of the body tokens of `input_ids` (batch, n), n > table: every
    window of every block in one forward."""
    batch, length = input_ids.shape
    body, width = length - 2, table - 2
    starts = torch.tensor(window_starts(body, table), device=input_ids.device)
    windows = len(starts)
    # (windows, table) columns of the block: its [CLS], the window's body tokens, its [SEP]
    columns = torch.cat(
        [
            starts.new_zeros(windows, 1),
            1 + starts[:, None] + torch.arange(width, device=input_ids.device),
            starts.new_full((windows, 1), length - 1),
        ],
        dim=1,
    )
    read = input_ids[:, columns]
    chosen, offsets = nearest_windows(body, table, input_ids.device)
    return tuple(
        states.view(batch, windows, table, -1)[:, chosen, 1 + offsets] for states in states_of(read.flatten(0, 1))
    )
