"""Property indicators of attention matrices (Wang et al. 2021, "On position embeddings in BERT", section 4).

Every function takes attention probabilities of shape (..., n, n), rows = queries i, columns = keys j, and
returns one number per matrix (...). The paper names the indicators but leaves some details open; the formulas
chosen here are spelled out in each docstring.
"""

from __future__ import annotations

import torch

from ..toeplitz import toeplitz_fit

LOCAL_OFFSETS = 20
MAX_COMPARISONS_PER_CHUNK = 1 << 24


def average_in_group_variance(attention: torch.Tensor) -> torch.Tensor:
    """Translation invariance, AIV (Wang et al. 2021): the pooled variance of the entries within each diagonal
    (the group of one offset k = j - i) divided by the variance of all entries,

        AIV = sum_k sum_{j - i = k} (A_ij - mean_k)^2 / sum_ij (A_ij - mean A)^2,

    0 for a perfectly translation-invariant (Toeplitz) matrix, about 1 when offsets explain nothing. The
    diagonal means are the best Toeplitz approximation, so AIV = 1 - R² of `tisa_hf.toeplitz_fit`.
    """
    return 1 - toeplitz_fit(attention).r2


def ordered_pair_ratio(attention: torch.Tensor, max_distance: int | None = None) -> torch.Tensor:
    """Monotonicity, OPR (Wang et al. 2021): the share of ordered pairs that break monotonic decay.

    For every query i and each side (keys j >= i, keys j <= i), every pair of distances 0 <= d1 < d2 <= D with
    both keys inside the sequence is compared: the pair breaks monotonicity when the farther key gets more
    attention, A[i, i±d2] > A[i, i±d1], and counts one half when both are equal. OPR = broken / all pairs,
    pooled over queries and sides: 0 when attention strictly decreases with distance, 1 when it strictly
    increases, 0.5 for a constant matrix. D = `max_distance` (all distances when None).

    With S = (pairs that decay) - (pairs that grow), broken = (pairs - S) / 2; S is Kendall's score of each
    side's sequence, summed here by direct comparison since no library scores thousands of them at once.
    """
    length = attention.shape[-1]
    if max_distance is None or max_distance >= length - 1:
        score, pairs = _decay_scores_all_distances(attention)
    else:
        score, pairs = _decay_scores_within(attention, max_distance)
    return (pairs - score) / (2 * pairs.clamp_min(1))


def _decay_scores_all_distances(attention: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Kendall's decay score S and pair count over every pair of keys on one side of each query.

    sign(A[i, j1] - A[i, j2]) for j1 < j2 is summed over j2 (the keys after j1) and over j1 (the keys before
    j2) once per row; the keys right of query i then score sum_{j1 >= i} of the first, the keys left of it
    minus sum_{j2 <= i} of the second.
    """
    length = attention.shape[-1]
    rows = attention.reshape(-1, length, length).float()
    positions = torch.arange(length)
    ahead = positions[None, :] > positions[:, None]
    right_of_query = positions[None, :] >= positions[:, None]
    left_of_query = positions[None, :] <= positions[:, None]
    chunk = max(1, MAX_COMPARISONS_PER_CHUNK // length**2)
    scores = torch.zeros(rows.shape[0], dtype=torch.float64)
    for index, matrix in enumerate(rows):
        for start in range(0, length, chunk):
            block = matrix[start : start + chunk]
            signs = torch.sign(block[:, :, None] - block[:, None, :]).mul_(ahead)
            right = (signs.sum(-1) * right_of_query[start : start + chunk]).sum()
            left = (signs.sum(-2) * left_of_query[start : start + chunk]).sum()
            scores[index] += right.double() - left.double()
    sides = torch.arange(1, length + 1, dtype=torch.float64)
    pairs = (sides * (sides - 1)).sum()
    return scores.reshape(attention.shape[:-2]), pairs


def _decay_scores_within(attention: torch.Tensor, max_distance: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Kendall's decay score S and pair count over pairs of distances up to `max_distance` on each side."""
    length = attention.shape[-1]
    distances = torch.arange(max_distance + 1)
    queries = torch.arange(length)[:, None]
    keys = torch.stack([queries + distances, queries - distances], 1)  # (n, 2, D+1)
    inside = (keys >= 0) & (keys < length)
    index = keys.clamp(0, length - 1).flatten(1)
    values = attention.gather(-1, index.expand(*attention.shape[:-1], -1)).unflatten(-1, keys.shape[1:])
    nearer_first = torch.ones(max_distance + 1, max_distance + 1, dtype=torch.bool).triu(1)
    valid = nearer_first & inside[:, :, :, None] & inside[:, :, None, :]
    signs = torch.sign(values[..., :, None] - values[..., None, :]) * valid
    return signs.sum((-4, -3, -2, -1)).double(), valid.sum().double()


def symmetric_discrepancy(attention: torch.Tensor) -> torch.Tensor:
    """Symmetry, SD (Wang et al. 2021): how far attention is from A_ij = A_ji, relative to its mass,

        SD = sum_{i<j} |A_ij - A_ji| / sum_{i<j} (A_ij + A_ji),

    0 for a symmetric matrix, 1 when every pair attends one way only.
    """
    upper = torch.triu(torch.ones(attention.shape[-2:], dtype=torch.bool), diagonal=1)
    transposed = attention.transpose(-1, -2)
    difference = ((attention - transposed).abs() * upper).sum((-2, -1))
    mass = ((attention + transposed) * upper).sum((-2, -1))
    return difference / mass.clamp_min(torch.finfo(mass.dtype).tiny)


def direction_balance(attention: torch.Tensor, window: int = LOCAL_OFFSETS) -> torch.Tensor:
    """Direction balance, DB (Wang et al. 2021), within `window` offsets:

        DB = (R - L) / (R + L),  R = sum_{0 < j-i <= window} A_ij,  L = sum_{0 < i-j <= window} A_ij,

    +1 when attention goes only to following tokens, -1 only to preceding ones, 0 when balanced.
    """
    offset = torch.arange(attention.shape[-1])[None, :] - torch.arange(attention.shape[-2])[:, None]
    right = (attention * ((offset > 0) & (offset <= window))).sum((-2, -1))
    left = (attention * ((offset < 0) & (offset >= -window))).sum((-2, -1))
    return (right - left) / (right + left).clamp_min(torch.finfo(attention.dtype).tiny)


def offset_traces(attention: torch.Tensor, max_offset: int = 10) -> torch.Tensor:
    """t-offset traces (Yamamoto and Matsuzaki 2023): tr_t(A) = (1/n) sum_i A[i, i+t] for t = -max_offset ..
    max_offset, returned as (..., 2 max_offset + 1). Each is the mean attention a query pays to the token t
    places away, so a head looking at the previous token has its largest trace at t = -1.
    """
    length = attention.shape[-1]
    traces = [
        attention.diagonal(offset=t, dim1=-2, dim2=-1).sum(-1) if abs(t) < length else attention[..., 0, 0] * 0
        for t in range(-max_offset, max_offset + 1)
    ]
    return torch.stack(traces, -1) / length
