"""Fitting TISA kernels to Toeplitz profiles by weighted least squares.

Every profile (all layers and heads, times every start) is one small problem: fit
`g(k) = sum_s a_s exp(-b_s (k - c_s)^2) + d` to p(k) with weights n - |k| for |k| <= W (the window), plus a
small ridge penalty on the amplitudes, with every kernel's width at most W (b_s >= 1 / W^2) and its centre
inside the window (|c_s| <= W). Without those limits the best fits often pair kernels of huge opposite
amplitudes and near-zero b that cancel inside the window: f then grows without bound past it, and fine-tuning,
which moves b by a relative amount, breaks the cancellation. The problems are solved together by a batched
Levenberg-Marquardt written here, since no library solves thousands of tiny bounded nonlinear least-squares
problems at once on a tensor backend; `scipy.optimize.least_squares` does one at a time and serves as the
reference in the benchmark. The constant d is dropped afterwards (softmax ignores it).

The fit runs with at most this process's share of the cores (`thread_share`): a fit at patch time in one of
several processes on a machine (a launcher's workers, sweeps side by side) would otherwise run as many threads as
the machine has cores in every process, and oversubscribed threads slow it several times over. Its result does
not depend on the thread count (every operation is batched over independent problems; bitwise identical with 1
and 2 threads in `scripts/bench_fit.py --concurrency`). A fit with more parameters per profile than offsets in
its window is refused, and one that takes long logs its progress (`PROGRESS_SECONDS`).
"""

from __future__ import annotations

import contextlib
import logging
import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, fields

import torch

from .errors import UsageError

logger = logging.getLogger(__name__)

MAX_SHARPNESS = 50.0
# Penalty on the amplitudes, lambda * sum_s a_s^2 with lambda = AMPLITUDE_RIDGE * sum of the weights: a kernel as
# tall as the profile's spread costs about 1e-4 of R², one a hundred times taller costs all of it.
AMPLITUDE_RIDGE = 1e-4
# A fit logs its progress once it has run this long, and again every time as long; the usual fit (S = 5, a few
# seconds) stays quiet.
PROGRESS_SECONDS = 10.0


@dataclass
class KernelFit:
    """Fitted kernels, each (..., S), the dropped constant (...,) and the weighted fit R² per profile."""

    amplitude: torch.Tensor
    sharpness: torch.Tensor
    center: torch.Tensor
    constant: torch.Tensor
    r2: torch.Tensor

    def to(self, device: torch.device) -> KernelFit:
        return KernelFit(**{field.name: getattr(self, field.name).to(device) for field in fields(self)})


@dataclass(frozen=True)
class _Problem:
    """What all profiles share: offsets k, their weights, the window W, S and the ridge weight lambda."""

    offsets: torch.Tensor
    weights: torch.Tensor
    window: int
    num_kernels: int
    ridge: float

    @property
    def min_log_sharpness(self) -> float:
        return -2 * math.log(self.window)

    @property
    def max_log_sharpness(self) -> float:
        return math.log(MAX_SHARPNESS)


def fit_kernels(
    profiles: torch.Tensor,
    num_kernels: int,
    window: int | None = None,
    restarts: int = 16,
    iterations: int = 150,
    seed: int = 0,
    ridge: float = AMPLITUDE_RIDGE,
) -> KernelFit:
    """Fits S kernels plus a constant to each profile of shape (..., 2n-1) (offsets -(n-1) .. n-1).

    Starts: 15 seeded at the profile's peaks (see `_peak_seeded_starts`), plus `restarts` random ones; all are
    iterated for a fifth of `iterations`, the best quarter of them for another fifth, and the best one to the end.
    The fit runs on the CPU in float64 wherever the profiles are (a small problem, and the same kernels for a model
    patched on any device); the result is on the profiles' device.
    """
    if num_kernels < 1:
        raise ValueError(f"fit_kernels needs num_kernels >= 1, got {num_kernels}.")
    if profiles.shape[-1] % 2 == 0 or profiles.shape[-1] < 3:
        raise ValueError(f"Profiles must hold 2n-1 >= 3 values (offsets -(n-1)..n-1); got {profiles.shape[-1]}.")
    length = (profiles.shape[-1] + 1) // 2
    window = min(window or length - 1, length - 1)
    check_fit_size(num_kernels, window)
    with threads_bounded_to_share():
        fit = _fit(profiles.detach().cpu(), num_kernels, window, restarts, iterations, seed, ridge)
    return fit.to(profiles.device)


def check_fit_size(num_kernels: int, window: int) -> None:
    """A UsageError when S kernels have more parameters (3S + 1 with the constant) than the window has offsets
    (2W + 1): the fit cannot determine them, and every iteration solves a system of that many parameters per
    profile and start, so its time grows with their cube and its memory with their square."""
    parameters, points = 3 * num_kernels + 1, 2 * window + 1
    if parameters > points:
        raise UsageError(
            f"A kernel fit of S = {num_kernels} kernels has {parameters} parameters per profile, more than the "
            f"{points} offsets of its window (fit_window = {window}), so the fit cannot determine them. Use at "
            f"most S = {2 * window // 3} kernels with init='fit', a fit_window of at least "
            f"{math.ceil(3 * num_kernels / 2)} (at most the profile length - 1), or init='zeros' or 'random'."
        )


def thread_share() -> int:
    """The cores this process may use: those its CPU affinity allows, shared equally among the processes that a
    launcher (accelerate, torchrun) started on this machine, as its LOCAL_WORLD_SIZE says."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    local_processes = os.environ.get("LOCAL_WORLD_SIZE", "")
    return max(1, cores // int(local_processes)) if local_processes.isdigit() and int(local_processes) > 0 else cores


@contextlib.contextmanager
def threads_bounded_to_share() -> Iterator[int]:
    """torch's CPU threads lowered to `thread_share()` while the block runs (never raised), restored afterwards."""
    previous = torch.get_num_threads()
    bounded = min(previous, thread_share())
    if bounded == previous:
        yield bounded
        return
    torch.set_num_threads(bounded)
    try:
        yield bounded
    finally:
        torch.set_num_threads(previous)


def _fit(
    profiles: torch.Tensor, num_kernels: int, window: int, restarts: int, iterations: int, seed: int, ridge: float
) -> KernelFit:
    batch_shape = profiles.shape[:-1]
    length = (profiles.shape[-1] + 1) // 2
    offsets = torch.arange(-window, window + 1, dtype=torch.float64)
    weights = (length - offsets.abs()) / length
    problem = _Problem(offsets, weights, window, num_kernels, ridge * weights.sum().item())
    target = profiles.to(torch.float64).reshape(-1, 2 * length - 1)[:, length - 1 - window : length + window]

    generator = torch.Generator().manual_seed(seed)
    starts = _peak_seeded_starts(target, offsets, num_kernels)
    starts += [_random_start(target, offsets, num_kernels, window, generator) for _ in range(restarts)]
    nonlinear = _clamped_nonlinear(torch.stack(starts, 1), problem)  # (problems, starts, 2S): log b, c
    problems, num_starts = nonlinear.shape[:2]
    nonlinear = nonlinear.reshape(problems * num_starts, -1)
    flat_target = target[:, None].expand(-1, num_starts, -1).reshape(problems * num_starts, -1)
    linear = _solve_linear(nonlinear, flat_target, problem)
    params = torch.cat([linear[:, :num_kernels], nonlinear, linear[:, -1:]], -1)
    damping = torch.full((params.shape[0],), 1e-2, dtype=params.dtype)
    schedule = _schedule(iterations, num_starts)
    progress = _Progress(problems, num_kernels, schedule, num_starts)
    for stage_iterations, survivors in schedule:
        params, cost, damping = _levenberg_marquardt(
            params, flat_target, problem, stage_iterations, damping, progress.step
        )
        keep = cost.reshape(problems, -1).argsort(1)[:, :survivors]
        rows = (torch.arange(problems)[:, None] * (params.shape[0] // problems) + keep).reshape(-1)
        params, cost, damping, flat_target = params[rows], cost[rows], damping[rows], flat_target[rows]
    best = cost.reshape(problems, -1).argmin(1)
    params = params.reshape(problems, -1, params.shape[-1])[torch.arange(problems), best]
    amplitude, log_sharpness, center, constant = _split(params, num_kernels)
    kernels_only = torch.cat([amplitude, log_sharpness, center, torch.zeros_like(constant)], -1)
    r2 = scoring_function_r2(target, _evaluate(kernels_only, problem)[1], weights)

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


def _evaluate(params: torch.Tensor, problem: _Problem) -> tuple[torch.Tensor, torch.Tensor]:
    """The kernels' values exp(-b (k - c)^2), (problems, S, K), and the model g(k), (problems, K)."""
    amplitude, log_sharpness, center, constant = _split(params, problem.num_kernels)
    bumps = torch.exp(-log_sharpness.exp()[..., None] * (problem.offsets - center[..., None]).square())
    return bumps, (amplitude[..., None] * bumps).sum(-2) + constant


def _residual(params: torch.Tensor, model: torch.Tensor, target: torch.Tensor, problem: _Problem) -> torch.Tensor:
    """Weighted misfit at every offset, then the ridge terms sqrt(lambda) a_s: (problems, K + S)."""
    amplitude = params[:, : problem.num_kernels]
    return torch.cat([problem.weights.sqrt() * (model - target), math.sqrt(problem.ridge) * amplitude], -1)


def _jacobian(params: torch.Tensor, bumps: torch.Tensor, problem: _Problem) -> torch.Tensor:
    """d residual / d params at `params`, whose kernel values are `bumps`: (problems, K + S, 3S+1)."""
    amplitude, log_sharpness, center, _ = _split(params, problem.num_kernels)
    sharpness = log_sharpness.exp()[..., None]
    distance = problem.offsets - center[..., None]
    scaled = amplitude[..., None] * sharpness * bumps
    d_log_sharpness = -scaled * distance.square()
    d_center = 2 * scaled * distance
    ones = torch.ones_like(bumps[:, :1])
    misfit = problem.weights.sqrt()[:, None] * torch.cat([bumps, d_log_sharpness, d_center, ones], 1).transpose(1, 2)
    ridge = torch.zeros(problem.num_kernels, params.shape[-1], dtype=params.dtype)
    ridge[:, : problem.num_kernels] = math.sqrt(problem.ridge) * torch.eye(problem.num_kernels, dtype=params.dtype)
    return torch.cat([misfit, ridge.expand(params.shape[0], -1, -1)], 1)


def _solve_linear(nonlinear: torch.Tensor, target: torch.Tensor, problem: _Problem) -> torch.Tensor:
    """Best amplitudes and constant for given (log b, c): a weighted, ridge-penalised linear least-squares solve."""
    log_sharpness, center = nonlinear.chunk(2, -1)
    bumps = torch.exp(-log_sharpness.exp()[..., None] * (problem.offsets - center[..., None]).square())
    basis = torch.cat([bumps, torch.ones_like(bumps[:, :1])], 1).transpose(1, 2)  # (P, K, S+1)
    root = problem.weights.sqrt()[:, None]
    gram = (root * basis).transpose(1, 2) @ (root * basis)
    penalty = torch.full((problem.num_kernels + 1,), problem.ridge, dtype=gram.dtype)
    penalty[-1] = 1e-10 * problem.weights.sum()  # the constant is free; this only keeps the system regular
    rhs = (root * basis).transpose(1, 2) @ (root[:, 0] * target)[..., None]
    return torch.linalg.solve(gram + torch.diag(penalty), rhs)[..., 0]


def _schedule(iterations: int, num_starts: int) -> list[tuple[int, int]]:
    """(iterations, starts kept afterwards) per stage: all starts for a fifth of the iterations, then the best
    quarter for another fifth, then the single best start for the rest (successive halving)."""
    first = max(1, iterations // 5)
    return [(first, max(1, num_starts // 4)), (first, 1), (max(0, iterations - 2 * first), 1)]


class _Progress:
    """INFO lines about a long fit: the first after `PROGRESS_SECONDS`, then one per `PROGRESS_SECONDS`, each
    with the share of the work done (iterations weighted by the starts still running) and the time left."""

    def __init__(self, problems: int, num_kernels: int, schedule: list[tuple[int, int]], num_starts: int):
        self.problems, self.num_kernels = problems, num_kernels
        rows = [num_starts] + [survivors for _, survivors in schedule[:-1]]
        self.weights = [
            starts for (iterations, _), starts in zip(schedule, rows, strict=True) for _ in range(iterations)
        ]
        self.total, self.done, self.iteration = sum(self.weights), 0, 0
        self.start = time.perf_counter()
        self.next_report = self.start + PROGRESS_SECONDS

    def step(self) -> None:
        """Counts one Levenberg-Marquardt iteration, and logs a line when one is due."""
        self.done += self.weights[self.iteration]
        self.iteration += 1
        now = time.perf_counter()
        if now < self.next_report or self.done >= self.total:
            return
        elapsed = now - self.start
        logger.info(
            "kernel fit (S = %d, %d profiles): %.0f%% after %.0f s, about %.0f s left",
            self.num_kernels,
            self.problems,
            100 * self.done / self.total,
            elapsed,
            elapsed * (self.total - self.done) / self.done,
        )
        self.next_report = now + PROGRESS_SECONDS


def _levenberg_marquardt(
    params, target, problem: _Problem, iterations: int, damping: torch.Tensor, on_iteration: Callable[[], None]
):
    """Batched Levenberg-Marquardt with Marquardt's diagonal scaling and the bounds enforced by clamping each
    step; one kernel evaluation per iteration, after which `on_iteration` is called."""
    bumps, model = _evaluate(params, problem)
    residual = _residual(params, model, target, problem)
    cost = residual.square().sum(-1)
    eye = torch.eye(params.shape[-1], dtype=params.dtype)
    for _ in range(iterations):
        jacobian = _jacobian(params, bumps, problem)
        gram = jacobian.transpose(1, 2) @ jacobian
        gradient = jacobian.transpose(1, 2) @ residual[..., None]
        scale = gram.diagonal(dim1=1, dim2=2).clamp_min(1e-12)
        system = gram + damping[:, None, None] * (torch.diag_embed(scale) + 1e-9 * eye)
        candidate = _clamped(params + torch.linalg.solve(system, -gradient)[..., 0], problem)
        candidate_bumps, candidate_model = _evaluate(candidate, problem)
        candidate_residual = _residual(candidate, candidate_model, target, problem)
        candidate_cost = candidate_residual.square().sum(-1)
        better = candidate_cost < cost
        params = torch.where(better[:, None], candidate, params)
        bumps = torch.where(better[:, None, None], candidate_bumps, bumps)
        residual = torch.where(better[:, None], candidate_residual, residual)
        cost = torch.where(better, candidate_cost, cost)
        damping = torch.where(better, damping / 3, damping * 4).clamp(1e-9, 1e9)
        on_iteration()
    return params, cost, damping


def _clamped_nonlinear(nonlinear: torch.Tensor, problem: _Problem) -> torch.Tensor:
    """(..., 2S) of log b and c, each within its bounds."""
    log_sharpness, center = nonlinear.chunk(2, -1)
    log_sharpness = log_sharpness.clamp(problem.min_log_sharpness, problem.max_log_sharpness)
    return torch.cat([log_sharpness, center.clamp(-problem.window, problem.window)], -1)


def _clamped(params: torch.Tensor, problem: _Problem) -> torch.Tensor:
    amplitude, log_sharpness, center, constant = _split(params, problem.num_kernels)
    nonlinear = _clamped_nonlinear(torch.cat([log_sharpness, center], -1), problem)
    return torch.cat([amplitude, nonlinear, constant], -1)


def _peak_seeded_starts(target: torch.Tensor, offsets: torch.Tensor, num_kernels: int) -> list[torch.Tensor]:
    """Greedy starts: centres at the S largest peaks of a signal, widths from each peak's half-width.

    The signals: the profile less its median, its minimum or its maximum (kernels on its bumps, its dips, or
    both), and its negative curvature (narrow bumps, also those riding on broad ones); and one mixed start, the
    median's first (broadest-reaching) peak with the S-1 first curvature peaks. Each at three width scales
    (x0.5, x1, x2 of the measured half-widths).
    """
    curvature = torch.nn.functional.pad(target[:, :-2] - 2 * target[:, 1:-1] + target[:, 2:], (1, 1))
    signals = [target - target.median(-1, keepdim=True).values, target - target.amin(-1, keepdim=True)]
    signals += [target - target.amax(-1, keepdim=True), -curvature]
    peaks = [_greedy_peaks(signal, offsets, num_kernels) for signal in signals]
    (median_centres, median_widths), (curvature_centres, curvature_widths) = peaks[0], peaks[3]
    peaks.append(
        (
            torch.cat([median_centres[:, :1], curvature_centres[:, : num_kernels - 1]], -1),
            torch.cat([median_widths[:, :1], curvature_widths[:, : num_kernels - 1]], -1),
        )
    )
    starts = []
    for centres, half_widths in peaks:
        for scale in (0.5, 1.0, 2.0):
            sharpness = math.log(2.0) / (scale * half_widths).square()
            starts.append(torch.cat([sharpness.log(), centres], -1))
    return starts


def _greedy_peaks(residual: torch.Tensor, offsets: torch.Tensor, num_kernels: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Centres and half-widths (problems, S) of S peaks of |residual|, each removed before finding the next."""
    centres, half_widths = [], []
    for _ in range(num_kernels):
        peak = residual.abs().argmax(-1)
        height = residual.gather(-1, peak[:, None])
        above_half = (residual * height.sign()) > height.abs() / 2
        half_width = _run_length_around(above_half, peak).clamp_min(1).to(residual.dtype)
        sharpness = math.log(2.0) / half_width.square()
        centre = offsets[peak]
        residual = residual - height * torch.exp(-sharpness[:, None] * (offsets - centre[:, None]).square())
        centres.append(centre)
        half_widths.append(half_width)
    return torch.stack(centres, -1), torch.stack(half_widths, -1)


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
