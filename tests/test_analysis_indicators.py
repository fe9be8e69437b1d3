"""Wang et al.'s indicators and the t-offset traces against hand-computed cases and a brute-force reference."""

import pytest
import torch
from scipy.linalg import toeplitz

from tisa_hf.analysis.indicators import (
    average_in_group_variance,
    direction_balance,
    offset_traces,
    ordered_pair_ratio,
    symmetric_discrepancy,
)


def brute_force_opr(matrix: torch.Tensor, max_distance: int | None = None) -> float:
    """OPR by enumerating every (query, side, d1 < d2) triple."""
    n = matrix.shape[0]
    max_distance = n - 1 if max_distance is None else max_distance
    broken = pairs = 0.0
    for i in range(n):
        for side in (1, -1):
            for d1 in range(max_distance + 1):
                for d2 in range(d1 + 1, max_distance + 1):
                    j1, j2 = i + side * d1, i + side * d2
                    if 0 <= j1 < n and 0 <= j2 < n:
                        pairs += 1
                        near, far = matrix[i, j1].item(), matrix[i, j2].item()
                        broken += 1.0 if far > near else 0.5 if far == near else 0.0
    return broken / pairs


def test_aiv_hand_computed():
    # Diagonals: offset 0 {1,5,9} -> 32, offsets ±1 {2,6},{4,8} -> 8 each, corners 0; total variance sum 60.
    matrix = torch.arange(1.0, 10.0).reshape(3, 3)
    assert average_in_group_variance(matrix).item() == pytest.approx(48 / 60)


def test_aiv_is_zero_for_toeplitz_and_near_one_for_random():
    generator = torch.Generator().manual_seed(0)
    column, row = torch.randn(40, generator=generator), torch.randn(40, generator=generator)
    row[0] = column[0]
    assert average_in_group_variance(torch.tensor(toeplitz(column, row))).item() == pytest.approx(0, abs=1e-12)
    assert average_in_group_variance(torch.rand(100, 100, generator=generator)).item() > 0.95


def test_opr_hand_computed():
    matrix = torch.tensor([[3.0, 1.0, 2.0], [1.0, 3.0, 2.0], [2.0, 2.0, 3.0]])
    # 8 pairs in all; row 0 right side (1 then 2) breaks once, row 2 left side ties once: 1.5 / 8.
    assert ordered_pair_ratio(matrix).item() == pytest.approx(1.5 / 8)
    assert ordered_pair_ratio(matrix, max_distance=1).item() == 0.0


def test_opr_extremes():
    distance = (torch.arange(12)[:, None] - torch.arange(12)[None, :]).abs().float()
    assert ordered_pair_ratio(torch.exp(-distance)).item() == 0.0
    assert ordered_pair_ratio(distance).item() == 1.0
    assert ordered_pair_ratio(torch.ones(12, 12)).item() == 0.5
    assert ordered_pair_ratio(torch.exp(-distance), max_distance=3).item() == 0.0


@pytest.mark.parametrize("max_distance", [None, 1, 4, 9])
def test_opr_matches_brute_force_on_batches_with_ties(max_distance):
    matrices = torch.randint(0, 4, (2, 3, 10, 10), generator=torch.Generator().manual_seed(1)).float()
    result = ordered_pair_ratio(matrices, max_distance)
    assert result.shape == (2, 3)
    for index in range(6):
        expected = brute_force_opr(matrices.flatten(0, 1)[index], max_distance)
        assert result.flatten()[index].item() == pytest.approx(expected)


def test_symmetric_discrepancy():
    assert symmetric_discrepancy(torch.tensor([[0.5, 0.5], [0.1, 0.9]])).item() == pytest.approx(0.4 / 0.6)
    symmetric = torch.rand(6, 6)
    assert symmetric_discrepancy(symmetric + symmetric.T).item() == pytest.approx(0, abs=1e-7)
    assert symmetric_discrepancy(torch.ones(5, 5).triu()).item() == 1.0


def test_direction_balance():
    matrix = torch.tensor([[0.5, 0.3, 0.2], [0.1, 0.6, 0.3], [0.2, 0.2, 0.6]])
    assert direction_balance(matrix, window=1).item() == pytest.approx((0.6 - 0.3) / 0.9)
    assert direction_balance(matrix, window=2).item() == pytest.approx((0.8 - 0.5) / 1.3)
    assert direction_balance(torch.ones(6, 6).triu()).item() == 1.0
    assert direction_balance(torch.ones(6, 6).tril()).item() == -1.0


def test_offset_traces():
    n = 8
    traces = offset_traces(torch.eye(n), max_offset=3)
    assert traces.tolist() == [0, 0, 0, 1, 0, 0, 0]
    previous_token = torch.diag(torch.ones(n - 1), -1)
    previous_token[0, 0] = 1
    traces = offset_traces(previous_token[None], max_offset=2)[0]
    assert traces.tolist() == pytest.approx([0, (n - 1) / n, 1 / n, 0, 0])
    assert offset_traces(torch.eye(3), max_offset=4).shape == (9,)
