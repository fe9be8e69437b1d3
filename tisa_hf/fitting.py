"""Fitting TISA kernels to Toeplitz profiles by weighted least squares.

Every profile (all layers and heads, times every start) is one small problem: fit
`g(k) = sum_s a_s exp(-b_s (k - c_s)^2) + d` to p(k) with weights n - |k| for |k| <= window. They are solved
together by a batched Levenberg-Marquardt written here, since no library solves thousands of tiny
nonlinear least-squares problems at once on a tensor backend; `scipy.optimize.least_squares` does one at a
time and serves as the reference in the benchmark. The constant d is dropped afterwards (softmax ignores it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

MIN_SHARPNESS = 1e-7
MAX_SHARPNESS = 50.0


@dataclass
class KernelFit:
    """Fitted kernels, each (..., S), the dropped constant (...,) and the weighted fit R² per profile."""

    amplitude: torch.Tensor
    sharpness: torch.Tensor
    center: torch.Tensor
    constant: torch.Tensor
    r2: torch.Tensor


def fit_kernels(
    profiles: torch.Tensor,
    num_kernels: int,
    window: int | None = None,
    restarts: int = 24,
    iterations: int = 150,
    seed: int = 0,
) -> KernelFit:
    """Fits S kernels plus a constant to each profile of shape (..., 2n-1) (offsets -(n-1) .. n-1).

    Starts: one seeded at the largest peaks of the profile, plus `restarts` random ones; the best wins.
    """
    if num_kernels < 1:
        raise ValueError(f"fit_kernels needs num_kernels >= 1, got {num_kernels}.")
    if profiles.shape[-1] % 2 == 0:
        raise ValueError(f"Profiles must hold 2n-1 values (offsets -(n-1)..n-1); got {profiles.shape[-1]}.")
    batch_shape = profiles.shape[:-1]
    length = (profiles.shape[-1] + 1) // 2
    window = min(window or length - 1, length - 1)
    offsets = torch.arange(-window, window + 1, dtype=torch.float64)
    target = profiles.to(torch.float64).reshape(-1, 2 * length - 1)[:, length - 1 - window : length + window]
    weights = (length - offsets.abs()) / length

    generator = torch.Generator().manual_seed(seed)
    starts = [_peak_seeded_start(target, offsets, num_kernels)]
    starts += [_random_start(target, offsets, num_kernels, window, generator) for _ in range(restarts)]
    nonlinear = torch.stack(starts, 1)  # (problems, starts, 2S): log b, c
    problems, num_starts = nonlinear.shape[:2]
    flat_target = target[:, None].expand(-1, num_starts, -1).reshape(problems * num_starts, -1)
    linear = _solve_linear(nonlinear.reshape(problems * num_starts, -1), flat_target, offsets, weights)
    params = torch.cat([linear[:, :num_kernels], nonlinear.reshape(problems * num_starts, -1), linear[:, -1:]], -1)
    damping = torch.full((params.shape[0],), 1e-2, dtype=params.dtype)
    for stage_iterations, survivors in _schedule(iterations, num_starts):
        params, cost, damping = _levenberg_marquardt(
            params, flat_target, offsets, weights, num_kernels, stage_iterations, damping
        )
        keep = cost.reshape(problems, -1).argsort(1)[:, :survivors]
        rows = (torch.arange(problems)[:, None] * (params.shape[0] // problems) + keep).reshape(-1)
        params, cost, damping, flat_target = params[rows], cost[rows], damping[rows], flat_target[rows]
    params = params.reshape(problems, -1)
    amplitude, log_sharpness, center, constant = _split(params, num_kernels)
    kernels_only = torch.cat([amplitude, log_sharpness, center, torch.zeros_like(constant)], -1)
    r2 = scoring_function_r2(target, _model(kernels_only, offsets, num_kernels), weights)

    def shaped(x: torch.Tensor) -> torch.Tensor:
        return x.reshape(*batch_shape, *x.shape[1:]).float()

    return KernelFit(
        amplitude=shaped(amplitude),
        sharpness=shaped(log_sharpness.exp()),
        center=shaped(center),
        constant=shaped(constant.squeeze(-1)),
        r2=shaped(r2),
    )


def _split(params: torch.Tensor, num_kernels: int):
    return params.split([num_kernels] * 3 + [1], -1)


def _evaluate(params: torch.Tensor, offsets: torch.Tensor, num_kernels: int) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernels' values exp(-b (k - c)^2), (problems, S, K), and the model g(k), (problems, K)."""
    amplitude, log_sharpness, center, constant = _split(params, num_kernels)
    bumps = torch.exp(-log_sharpness.exp()[..., None] * (offsets - center[..., None]).square())
    return bumps, (amplitude[..., None] * bumps).sum(-2) + constant


def _model(params: torch.Tensor, offsets: torch.Tensor, num_kernels: int) -> torch.Tensor:
    return _evaluate(params, offsets, num_kernels)[1]


def _jacobian(params: torch.Tensor, bumps: torch.Tensor, offsets: torch.Tensor, num_kernels: int) -> torch.Tensor:
    """d model / d params at `params`, whose kernel values are `bumps`: (problems, K, 3S+1)."""
    amplitude, log_sharpness, center, _ = _split(params, num_kernels)
    sharpness = log_sharpness.exp()[..., None]
    distance = offsets - center[..., None]
    scaled = amplitude[..., None] * sharpness * bumps
    d_log_sharpness = -scaled * distance.square()
    d_center = 2 * scaled * distance
    ones = torch.ones_like(bumps[:, :1])
    return torch.cat([bumps, d_log_sharpness, d_center, ones], 1).transpose(1, 2)


def _solve_linear(nonlinear: torch.Tensor, target: torch.Tensor, offsets: torch.Tensor, weights: torch.Tensor):
    """Best amplitudes and constant for given (log b, c): a weighted linear least-squares solve."""
    log_sharpness, center = nonlinear.chunk(2, -1)
    bumps = torch.exp(-log_sharpness.exp()[..., None] * (offsets - center[..., None]).square())
    basis = torch.cat([bumps, torch.ones_like(bumps[:, :1])], 1).transpose(1, 2)  # (P, K, S+1)
    root = weights.sqrt()[:, None]
    gram = (root * basis).transpose(1, 2) @ (root * basis)
    ridge = 1e-8 * torch.eye(gram.shape[-1], dtype=gram.dtype) * gram.diagonal(dim1=1, dim2=2).mean(-1)[:, None, None]
    rhs = (root * basis).transpose(1, 2) @ (root[:, 0] * target)[..., None]
    return torch.linalg.solve(gram + ridge, rhs)[..., 0]


def _schedule(iterations: int, num_starts: int) -> list[tuple[int, int]]:
    """(iterations, starts kept afterwards) per stage: all starts for a fifth of the iterations, then the best
    quarter for another fifth, then the single best start for the rest (successive halving)."""
    first = max(1, iterations // 5)
    return [(first, max(1, num_starts // 4)), (first, 1), (max(0, iterations - 2 * first), 1)]


def _levenberg_marquardt(params, target, offsets, weights, num_kernels, iterations, damping):
    """Batched Levenberg-Marquardt with Marquardt's diagonal scaling; one kernel evaluation per iteration."""
    root = weights.sqrt()
    bumps, model = _evaluate(params, offsets, num_kernels)
    residual = root * (model - target)
    cost = residual.square().sum(-1)
    eye = torch.eye(params.shape[-1], dtype=params.dtype)
    for _ in range(iterations):
        jacobian = root[:, None] * _jacobian(params, bumps, offsets, num_kernels)
        gram = jacobian.transpose(1, 2) @ jacobian
        gradient = jacobian.transpose(1, 2) @ residual[..., None]
        scale = gram.diagonal(dim1=1, dim2=2).clamp_min(1e-12)
        system = gram + damping[:, None, None] * (torch.diag_embed(scale) + 1e-9 * eye)
        candidate = _clamped(params + torch.linalg.solve(system, -gradient)[..., 0], num_kernels)
        candidate_bumps, candidate_model = _evaluate(candidate, offsets, num_kernels)
        candidate_residual = root * (candidate_model - target)
        candidate_cost = candidate_residual.square().sum(-1)
        better = candidate_cost < cost
        params = torch.where(better[:, None], candidate, params)
        bumps = torch.where(better[:, None, None], candidate_bumps, bumps)
        residual = torch.where(better[:, None], candidate_residual, residual)
        cost = torch.where(better, candidate_cost, cost)
        damping = torch.where(better, damping / 3, damping * 4).clamp(1e-9, 1e9)
    return params, cost, damping


def _clamped(params: torch.Tensor, num_kernels: int) -> torch.Tensor:
    amplitude, log_sharpness, center, constant = _split(params, num_kernels)
    log_sharpness = log_sharpness.clamp(torch.log(torch.tensor(MIN_SHARPNESS)), torch.log(torch.tensor(MAX_SHARPNESS)))
    return torch.cat([amplitude, log_sharpness, center, constant], -1)


def _peak_seeded_start(target: torch.Tensor, offsets: torch.Tensor, num_kernels: int) -> torch.Tensor:
    """Centres at the S largest deviations from the median, found greedily; widths from each peak's half-width."""
    residual = target - target.median(-1, keepdim=True).values
    centres, log_sharpness = [], []
    for _ in range(num_kernels):
        peak = residual.abs().argmax(-1)
        height = residual.gather(-1, peak[:, None])
        above_half = (residual * height.sign()) > height.abs() / 2
        half_width = _run_length_around(above_half, peak).clamp_min(1).to(target.dtype)
        sharpness = torch.log(torch.tensor(2.0, dtype=target.dtype)) / half_width.square()
        centre = offsets[peak]
        residual = residual - height * torch.exp(-sharpness[:, None] * (offsets - centre[:, None]).square())
        centres.append(centre)
        log_sharpness.append(sharpness.log())
    return torch.cat([torch.stack(log_sharpness, -1), torch.stack(centres, -1)], -1)


def _run_length_around(mask: torch.Tensor, peak: torch.Tensor) -> torch.Tensor:
    """Half the length of the run of True values that contains `peak`, per row."""
    positions = torch.arange(mask.shape[-1])
    outside = ~mask
    left = torch.where(outside & (positions < peak[:, None]), positions, -1).max(-1).values
    right = torch.where(outside & (positions > peak[:, None]), positions, mask.shape[-1]).min(-1).values
    return (right - left - 1) / 2


def _random_start(target, offsets, num_kernels: int, window: int, generator: torch.Generator) -> torch.Tensor:
    shape = (target.shape[0], num_kernels)
    centre = (2 * torch.rand(shape, generator=generator, dtype=target.dtype) - 1) * window
    width = torch.exp(
        torch.rand(shape, generator=generator, dtype=target.dtype) * torch.log(torch.tensor(window + 1.0))
    )
    return torch.cat([(1 / width.square()).log(), centre], -1)


def scoring_function_r2(profiles: torch.Tensor, values: torch.Tensor, weights: torch.Tensor) -> torch.Tensor:
    """Weighted R² of scoring-function values (..., K) against profiles (..., K) on the same offsets.

    `weights` (K,) are the diagonal lengths; the best constant shift is allowed, since softmax ignores it.
    """
    profiles, values, weights = profiles.double(), values.double(), weights.double()
    residual = profiles - values
    shift = (weights * residual).sum(-1, keepdim=True) / weights.sum()
    mean = (weights * profiles).sum(-1, keepdim=True) / weights.sum()
    total = (weights * (profiles - mean).square()).sum(-1)
    error = (weights * (residual - shift).square()).sum(-1)
    return torch.where(total > 0, 1 - error / total.clamp_min(1e-300), 1.0)
