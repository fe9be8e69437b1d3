"""Position-table numbers: Toeplitz R² of P, DFT amplitudes and PCA, against independent computations."""

import math

import numpy as np
import pytest
import torch
from scipy.linalg import toeplitz
from transformers import RobertaModel

from tests.fixtures import tiny_config
from tisa_hf.analysis.embeddings import (
    amplitude_spectrum,
    dimensions_for_variance,
    gram_toeplitzness,
    pca_cumulative_variance,
    position_table,
)


def sinusoidal_table(length: int, cycles: list[int], amplitudes: list[float]) -> torch.Tensor:
    """Columns cos and sin of 2π k p / length for each whole number of cycles k."""
    positions = torch.arange(length, dtype=torch.float64)
    columns = []
    for k, amplitude in zip(cycles, amplitudes, strict=True):
        angle = 2 * math.pi * k * positions / length
        columns += [amplitude * torch.cos(angle), amplitude * torch.sin(angle)]
    return torch.stack(columns, 1)


def reference_toeplitz_r2(matrix: np.ndarray) -> float:
    n = matrix.shape[0]
    means = {k: np.diagonal(matrix, k).mean() for k in range(1 - n, n)}
    approximation = toeplitz([means[-k] for k in range(n)], [means[k] for k in range(n)])
    return 1 - ((matrix - approximation) ** 2).sum() / ((matrix - matrix.mean()) ** 2).sum()


def test_sinusoidal_embeddings_have_a_toeplitz_gram():
    result = gram_toeplitzness(sinusoidal_table(200, [1, 3, 7, 20], [1.0, 0.5, 2.0, 1.0]), prefix_length=50)
    assert result.r2 == pytest.approx(1, abs=1e-9)
    assert result.prefix_r2 == pytest.approx(1, abs=1e-9)
    assert result.prefix_length == 50


def test_gram_r2_matches_reference_on_random_table():
    table = torch.randn(60, 8, generator=torch.Generator().manual_seed(0))
    result = gram_toeplitzness(table, prefix_length=20)
    gram = (table.double() @ table.double().T).numpy()
    assert result.r2 == pytest.approx(reference_toeplitz_r2(gram))
    assert result.prefix_r2 == pytest.approx(reference_toeplitz_r2(gram[:20, :20]))
    assert result.r2 < 0.9


def test_dft_peaks_of_sinusoids():
    length, cycles, amplitudes = 128, [3, 10, 25], [1.0, 0.5, 2.0]
    table = sinusoidal_table(length, cycles, amplitudes) + 4.0
    spectrum = amplitude_spectrum(table)
    expected_peaks = torch.tensor([k / length for k in cycles for _ in range(2)], dtype=torch.float64)
    assert torch.allclose(spectrum.peak_frequencies, expected_peaks)
    for column, k in enumerate(k for k in cycles for _ in range(2)):
        assert spectrum.amplitude[k, column].item() == pytest.approx(amplitudes[column // 2])
        assert spectrum.amplitude[0, column].item() == pytest.approx(4.0)
        others = torch.ones(spectrum.amplitude.shape[0], dtype=torch.bool)
        others[[0, k]] = False
        assert spectrum.amplitude[others, column].max().item() < 1e-9
    assert spectrum.quantiles().shape == (3, length // 2 + 1)


def test_pca_of_a_rank_three_table():
    generator = torch.Generator().manual_seed(0)
    table = torch.randn(50, 3, generator=generator) @ torch.randn(3, 16, generator=generator)
    cumulative = pca_cumulative_variance(table)
    centred = (table - table.mean(0)).double().numpy()
    singular = np.linalg.svd(centred, compute_uv=False) ** 2
    assert cumulative == pytest.approx(np.cumsum(singular) / singular.sum())
    assert cumulative[2] == pytest.approx(1)
    assert dimensions_for_variance(cumulative, 0.999) == 3
    assert dimensions_for_variance(cumulative, cumulative[0]) == 1


def test_position_table_skips_robertas_padding_rows():
    config = tiny_config("roberta", vocab_size=50, hidden_size=16, num_hidden_layers=1, max_position_embeddings=20)
    model = RobertaModel(config)
    table = position_table(model)
    assert table.shape == (18, 16)
    assert torch.equal(table, model.embeddings.position_embeddings.weight[2:].detach())
    assert position_table(model, 5).shape == (5, 16)
