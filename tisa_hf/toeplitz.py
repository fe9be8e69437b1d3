"""Best Toeplitz approximation of square matrices and its R² (the TISA paper's appendix B)."""

from __future__ import annotations

from dataclasses import dataclass

import torch


def offset_index(length: int, device: torch.device | str | None = None) -> torch.Tensor:
    """(n, n) index of each entry's diagonal, j - i + n - 1, in 0 .. 2n-2."""
    positions = torch.arange(length, device=device)
    return positions[None, :] - positions[:, None] + length - 1


@dataclass
class ToeplitzFit:
    """`profile[..., k + n - 1]` is the mean of diagonal k = j - i; `r2` is the R² of that approximation."""

    profile: torch.Tensor
    r2: torch.Tensor

    @property
    def offsets(self) -> torch.Tensor:
        length = (self.profile.shape[-1] + 1) // 2
        return torch.arange(1 - length, length)

    @property
    def diagonal_lengths(self) -> torch.Tensor:
        length = (self.profile.shape[-1] + 1) // 2
        return length - self.offsets.abs()


def toeplitz_fit(matrices: torch.Tensor) -> ToeplitzFit:
    """Least-squares Toeplitz fit of (..., n, n) matrices: the mean along each diagonal, and its R².

    R² = 1 - sum (M - T)^2 / sum (M - mean M)^2 over all entries; a constant matrix counts as R² = 1.
    """
    if matrices.ndim < 2 or matrices.shape[-1] != matrices.shape[-2]:
        raise ValueError(f"toeplitz_fit needs square matrices (..., n, n); got shape {tuple(matrices.shape)}.")
    matrices = matrices.to(torch.float64)
    length = matrices.shape[-1]
    index = offset_index(length, matrices.device).flatten()
    flat = matrices.flatten(-2)
    sums = torch.zeros(*flat.shape[:-1], 2 * length - 1, dtype=flat.dtype, device=flat.device)
    sums.index_add_(-1, index, flat)
    counts = length - torch.arange(1 - length, length, device=flat.device).abs()
    profile = sums / counts
    residual = (flat - profile[..., index]).square().sum(-1)
    total = (flat - flat.mean(-1, keepdim=True)).square().sum(-1)
    r2 = torch.where(total > 0, 1 - residual / total.clamp_min(torch.finfo(total.dtype).tiny), 1.0)
    return ToeplitzFit(profile=profile, r2=r2)
