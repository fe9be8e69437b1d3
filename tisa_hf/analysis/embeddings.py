"""Numbers of the position table E_P: Toeplitzness of P = E_P E_P^T (the TISA paper's section 3.1 and
appendix B) and its spectral view (Yamamoto and Matsuzaki 2023, "Absolute position embedding learns
sinusoid-like waves")."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from sklearn.decomposition import PCA
from transformers import PreTrainedModel

from ..adapters import find_base_model
from ..toeplitz import toeplitz_fit

SHORT_PREFIX = 128
VARIANCE_LEVELS = (0.5, 0.9, 0.95, 0.99)


def position_table(model: PreTrainedModel, length: int | None = None) -> torch.Tensor:
    """E_P: the (n, d) rows of the position table that real tokens use (RoBERTa's padding rows skipped)."""
    base, adapter = find_base_model(model)
    return adapter.position_rows(base)[:length].detach().float().cpu()


@dataclass
class GramToeplitzness:
    """P = E_P E_P^T with the R² of its best Toeplitz approximation, whole and over the first positions."""

    gram: torch.Tensor
    r2: float
    prefix_length: int
    prefix_r2: float


def gram_toeplitzness(table: torch.Tensor, prefix_length: int = SHORT_PREFIX) -> GramToeplitzness:
    """Toeplitz R² of P for the whole table and for its first `prefix_length` positions (BERT pre-trains
    mostly on sequences of 128 tokens, which shows in that corner)."""
    gram = table.double() @ table.double().T
    prefix_length = min(prefix_length, gram.shape[0])
    prefix = gram[:prefix_length, :prefix_length]
    return GramToeplitzness(
        gram=gram.float(),
        r2=toeplitz_fit(gram).r2.item(),
        prefix_length=prefix_length,
        prefix_r2=toeplitz_fit(prefix).r2.item(),
    )


@dataclass
class AmplitudeSpectrum:
    """`amplitude[f, d]`: amplitude of frequency `frequencies[f]` (cycles per position) in dimension d."""

    frequencies: torch.Tensor
    amplitude: torch.Tensor

    def quantiles(self, levels: tuple[float, ...] = (0.25, 0.5, 0.75)) -> torch.Tensor:
        """(len(levels), F): quantiles over the dimensions at each frequency."""
        return torch.quantile(self.amplitude, torch.tensor(levels, dtype=self.amplitude.dtype), dim=1)

    @property
    def mean(self) -> torch.Tensor:
        return self.amplitude.mean(1)

    @property
    def peak_frequencies(self) -> torch.Tensor:
        """The frequency of largest amplitude (the DC term excluded) of each dimension."""
        return self.frequencies[1:][self.amplitude[1:].argmax(0)]


def amplitude_spectrum(table: torch.Tensor) -> AmplitudeSpectrum:
    """Single-sided DFT amplitude of each dimension over positions, scaled so that a + b cos(2π f p) has
    amplitude a at f = 0 and b at f (for f a whole number of cycles over the table, below Nyquist)."""
    length = table.shape[0]
    spectrum = torch.fft.rfft(table.double(), dim=0).abs() / length
    spectrum[1 : (length + 1) // 2] *= 2
    return AmplitudeSpectrum(frequencies=torch.fft.rfftfreq(length, dtype=torch.float64), amplitude=spectrum)


def pca_cumulative_variance(table: torch.Tensor) -> np.ndarray:
    """Cumulative share of the variance of E_P (rows = positions) held by its first 1, 2, ... principal axes."""
    pca = PCA(n_components=min(table.shape), svd_solver="full").fit(table.double().numpy())
    return np.cumsum(pca.explained_variance_ratio_)


def dimensions_for_variance(cumulative: np.ndarray, level: float) -> int:
    """The fewest principal axes that hold at least `level` of the variance."""
    return int(np.searchsorted(cumulative, level - 1e-12) + 1)
