"""Toeplitz reduction and kernel fitting against independent computations."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.linalg import toeplitz

import tisa_hf
from tisa_hf.kernels import kernel_values, toeplitz_from_offsets


def test_toeplitz_matrix_has_r2_one_and_its_profile():
    column, row = np.random.randn(6), np.random.randn(6)
    row[0] = column[0]
    matrix = torch.tensor(toeplitz(column, row))
    fit = tisa_hf.toeplitz_fit(matrix)
    assert fit.r2.item() == pytest.approx(1.0)
    # profile[k + n - 1] is the value on diagonal k = j - i: the row for k >= 0, the column for k < 0.
    np.testing.assert_allclose(fit.profile.numpy(), np.concatenate([column[::-1], row[1:]]))


def test_random_matrix_has_r2_near_zero():
    fit = tisa_hf.toeplitz_fit(torch.randn(4, 200, 200))
    assert fit.r2.shape == (4,)
    assert fit.r2.abs().max() < 0.03


def test_r2_matches_a_hand_computation():
    matrix = torch.tensor([[1.0, 2.0, 0.0], [4.0, 3.0, 2.0], [0.0, 2.0, 5.0]])
    # Diagonal means: k=-2: 0; k=-1: (4+2)/2 = 3; k=0: 3; k=1: 2; k=2: 0.
    approx = torch.tensor([[3.0, 2.0, 0.0], [3.0, 3.0, 2.0], [0.0, 3.0, 3.0]])
    expected = 1 - ((matrix - approx) ** 2).sum() / ((matrix - matrix.mean()) ** 2).sum()
    fit = tisa_hf.toeplitz_fit(matrix)
    torch.testing.assert_close(fit.profile.float(), torch.tensor([0.0, 3.0, 3.0, 2.0, 0.0]))
    assert fit.r2.item() == pytest.approx(expected.item())


def test_non_square_input_is_rejected():
    with pytest.raises(ValueError, match=r"square matrices \(\.\.\., n, n\); got shape \(3, 4\)"):
        tisa_hf.toeplitz_fit(torch.zeros(3, 4))


def test_toeplitz_from_offsets_matches_scipy():
    values = torch.randn(2, 9)
    built = toeplitz_from_offsets(values, 5)
    for head in range(2):
        expected = toeplitz(values[head, :5].flip(0).numpy(), values[head, 4:].numpy())
        np.testing.assert_allclose(built[head].numpy(), expected)


def test_fit_recovers_known_kernels():
    length = 65
    offsets = torch.arange(1 - length, length, dtype=torch.float64)
    amplitude = torch.tensor([[2.0, -1.0], [0.5, 1.5]], dtype=torch.float64)
    sharpness = torch.tensor([[0.5, 0.01], [0.2, 0.002]], dtype=torch.float64)
    center = torch.tensor([[0.0, 10.0], [-3.0, 5.0]], dtype=torch.float64)
    profiles = kernel_values(amplitude, sharpness, center, offsets) + 0.7
    fit = tisa_hf.fit_kernels(profiles, 2, window=40)
    assert fit.r2.min() > 0.999
    torch.testing.assert_close(fit.constant.double(), torch.full((2,), 0.7, dtype=torch.float64), atol=2e-2, rtol=0)
    fitted = kernel_values(fit.amplitude.double(), fit.sharpness.double(), fit.center.double(), offsets[24:-24])
    torch.testing.assert_close(fitted, profiles[:, 24:-24] - 0.7, atol=2e-2, rtol=0)


def test_fit_keeps_every_kernel_inside_the_window_and_at_most_its_width():
    profiles = torch.randn(8, 81, generator=torch.Generator().manual_seed(0)).cumsum(-1)
    fit = tisa_hf.fit_kernels(profiles, 3, window=20, restarts=4)
    assert fit.sharpness.min() >= 1 / 20**2 * (1 - 1e-5)
    assert fit.center.abs().max() <= 20 * (1 + 1e-6)


def test_amplitude_ridge_trades_a_little_r2_for_smaller_kernels():
    profiles = torch.randn(8, 81, generator=torch.Generator().manual_seed(1)).cumsum(-1)
    free = tisa_hf.fit_kernels(profiles, 3, window=20, restarts=4, ridge=0.0)
    strong = tisa_hf.fit_kernels(profiles, 3, window=20, restarts=4, ridge=1.0)
    assert strong.amplitude.abs().sum() < free.amplitude.abs().sum()
    assert (strong.r2 <= free.r2 + 1e-3).all()


def test_fit_r2_is_the_weighted_r2_of_the_returned_kernels():
    profiles = torch.randn(3, 41).cumsum(-1)
    fit = tisa_hf.fit_kernels(profiles, 3, window=12, restarts=2)
    offsets = torch.arange(-12, 13, dtype=torch.float64)
    target = profiles[:, 20 - 12 : 20 + 13].double()
    weights = 21 - offsets.abs()
    model = kernel_values(fit.amplitude.double(), fit.sharpness.double(), fit.center.double(), offsets)
    model = model + fit.constant.double()[:, None]
    mean = (weights * target).sum(-1, keepdim=True) / weights.sum()
    expected = 1 - (weights * (target - model) ** 2).sum(-1) / (weights * (target - mean) ** 2).sum(-1)
    torch.testing.assert_close(fit.r2.double(), expected, atol=1e-4, rtol=0)


@pytest.mark.parametrize(
    ("kwargs", "message"), [({"num_kernels": 0}, "num_kernels >= 1"), ({"num_kernels": 2}, "2n-1")]
)
def test_fit_rejects_bad_arguments(kwargs, message):
    with pytest.raises(ValueError, match=message):
        tisa_hf.fit_kernels(torch.zeros(2, 10), **kwargs)
