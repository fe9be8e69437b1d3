"""Toeplitz reduction and kernel fitting against independent computations."""

from __future__ import annotations

import logging
import os

import numpy as np
import pytest
import torch

import tisa_hf
from tests.fixtures import requires_extra
from tisa_hf import fitting
from tisa_hf.errors import UsageError
from tisa_hf.kernels import kernel_values, toeplitz_from_offsets

pytestmark = pytest.mark.core


@requires_extra("analysis")
def test_toeplitz_matrix_has_r2_one_and_its_profile():
    from scipy.linalg import toeplitz

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


@requires_extra("analysis")
def test_toeplitz_from_offsets_matches_scipy():
    from scipy.linalg import toeplitz

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


def test_fit_with_more_parameters_than_window_offsets_is_refused_with_the_fix():
    message = (
        "A kernel fit of S = 200 kernels has 601 parameters per profile, more than the 129 offsets of its window "
        "(fit_window = 64), so the fit cannot determine them. Use at most S = 42 kernels with init='fit', a "
        "fit_window of at least 300 (at most the profile length - 1), or init='zeros' or 'random'."
    )
    with pytest.raises(UsageError) as error:
        tisa_hf.fit_kernels(torch.zeros(3, 1023), 200, window=64)
    assert str(error.value) == message
    assert tisa_hf.fit_kernels(torch.randn(1, 11), 3, window=5, restarts=1).r2.shape == (1,)  # 10 <= 11: allowed


def _threads_inside_the_fit(monkeypatch) -> list[int]:
    seen = []
    solve = fitting._levenberg_marquardt

    def spy(*args):
        seen.append(torch.get_num_threads())
        return solve(*args)

    monkeypatch.setattr(fitting, "_levenberg_marquardt", spy)
    return seen


@pytest.mark.skipif(fitting.thread_share() < 2, reason="needs 2 cores to lower the threads from")
def test_fit_runs_with_its_share_of_the_cores_restores_the_threads_and_gives_the_same_result(monkeypatch):
    profiles = torch.randn(6, 41)
    threads = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        unbounded = tisa_hf.fit_kernels(profiles, 2, window=12, restarts=2)
        seen = _threads_inside_the_fit(monkeypatch)
        monkeypatch.setenv("LOCAL_WORLD_SIZE", str(fitting.thread_share()))  # one core per local process
        bounded = tisa_hf.fit_kernels(profiles, 2, window=12, restarts=2)
        assert seen == [1, 1, 1] and torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(threads)
    for name in ("amplitude", "sharpness", "center", "constant", "r2"):
        assert torch.equal(getattr(bounded, name), getattr(unbounded, name)), name


def test_thread_share_divides_the_affine_cores_among_local_processes(monkeypatch):
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    cores = len(os.sched_getaffinity(0))
    assert fitting.thread_share() == cores
    monkeypatch.setenv("LOCAL_WORLD_SIZE", "2")
    assert fitting.thread_share() == max(1, cores // 2)
    monkeypatch.setenv("LOCAL_WORLD_SIZE", str(4 * cores))
    assert fitting.thread_share() == 1


def test_long_fit_logs_progress_and_a_short_one_stays_quiet(monkeypatch, caplog):
    profiles = torch.randn(4, 41)
    with caplog.at_level(logging.INFO, logger="tisa_hf.fitting"):
        tisa_hf.fit_kernels(profiles, 2, window=12, restarts=2, iterations=20)
        assert caplog.records == []
        monkeypatch.setattr(fitting, "PROGRESS_SECONDS", 0.0)
        tisa_hf.fit_kernels(profiles, 2, window=12, restarts=2, iterations=20)
    lines = [record.getMessage() for record in caplog.records]
    # 4 + 4 + 12 iterations over 17, 4 and 1 starts (15 peak-seeded + 2 random, then the best quarter, then the
    # best): 96 units, the first iteration 17 of them; a line after each iteration but the last.
    assert len(lines) == 19
    assert lines[0].startswith("kernel fit (S = 2, 4 profiles): 18% after 0 s, about ")
    assert lines[-1].startswith("kernel fit (S = 2, 4 profiles): 99% after ")
