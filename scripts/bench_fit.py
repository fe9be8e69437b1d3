"""Kernel-fit benchmark on the packaged MiniLM: tisa-hf's batched fit against scipy's least_squares.

Prints, per S, the wall time of extracting and fitting all heads, and how the fit R² of each head compares
with the best of `--scipy-starts` random starts of `scipy.optimize.least_squares` on the same profile.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import time

import numpy as np
import torch
from scipy.optimize import least_squares
from transformers import AutoModel

import tisa_hf
from tisa_hf.fitting import AMPLITUDE_RIDGE, MAX_SHARPNESS, scoring_function_r2


def scipy_best_r2(profile: np.ndarray, num_kernels: int, window: int, starts: int, rng: np.random.Generator) -> float:
    """Best weighted R² of g(k) = sum a exp(-b (k - c)^2) (+ a free constant) over random starts, by scipy's
    least_squares on the problem `tisa_hf.fit_kernels` solves: the same weights, amplitude ridge and bounds."""
    length = (profile.shape[0] + 1) // 2
    offsets = np.arange(-window, window + 1, dtype=float)
    target = profile[length - 1 - window : length + window]
    weights = (length - np.abs(offsets)) / length
    root = np.sqrt(weights)
    ridge = np.sqrt(AMPLITUDE_RIDGE * weights.sum())

    def split(theta: np.ndarray) -> tuple[np.ndarray, ...]:
        return theta[:num_kernels], theta[num_kernels : 2 * num_kernels], theta[2 * num_kernels : -1], theta[-1]

    def residual(theta: np.ndarray) -> np.ndarray:
        a, log_b, c, d = split(theta)
        bumps = np.exp(-np.exp(log_b)[:, None] * (offsets[None] - c[:, None]) ** 2)
        return np.concatenate([root * (a @ bumps + d - target), ridge * a])

    def jacobian(theta: np.ndarray) -> np.ndarray:
        a, log_b, c, _ = split(theta)
        sharpness = np.exp(log_b)[:, None]
        distance = offsets[None] - c[:, None]
        bumps = np.exp(-sharpness * distance**2)
        scaled = a[:, None] * sharpness * bumps
        misfit = (root * np.vstack([bumps, -scaled * distance**2, 2 * scaled * distance, np.ones_like(offsets)])).T
        penalty = np.zeros((num_kernels, theta.size))
        penalty[:, :num_kernels] = ridge * np.eye(num_kernels)
        return np.vstack([misfit, penalty])

    lower = np.concatenate(
        [
            np.full(num_kernels, -np.inf),
            np.full(num_kernels, -2 * np.log(window)),
            np.full(num_kernels, -float(window)),
            [-np.inf],
        ]
    )
    upper = np.concatenate(
        [
            np.full(num_kernels, np.inf),
            np.full(num_kernels, np.log(MAX_SHARPNESS)),
            np.full(num_kernels, float(window)),
            [np.inf],
        ]
    )
    bounds = (lower, upper)
    best_cost, best_theta = np.inf, None
    for _ in range(starts):
        theta = np.concatenate(
            [
                rng.normal(0, target.std() + 1e-9, num_kernels),
                -2 * rng.uniform(0, np.log(window), num_kernels),
                rng.uniform(-window, window, num_kernels),
                [target.mean()],
            ]
        )
        result = least_squares(residual, theta, jac=jacobian, bounds=bounds, method="trf", max_nfev=2000)
        if result.cost < best_cost:
            best_cost, best_theta = result.cost, result.x
    a, log_b, c, _ = split(best_theta)
    kernels = a @ np.exp(-np.exp(log_b)[:, None] * (offsets[None] - c[:, None]) ** 2)
    r2 = scoring_function_r2(torch.from_numpy(target), torch.from_numpy(kernels), torch.from_numpy(weights))
    return float(r2)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="minilm", help="model path or Hub id (default: the packaged MiniLM)")
    parser.add_argument("--kernels", type=int, nargs="+", default=[5])
    parser.add_argument("--window", type=int, default=tisa_hf.TisaConfig().fit_window)
    parser.add_argument("--scipy-starts", type=int, default=20)
    parser.add_argument("--json", default=None, help="write the results here")
    args = parser.parse_args()
    model = AutoModel.from_pretrained(tisa_hf.resolve_model(args.model))
    start = time.perf_counter()
    profiles = tisa_hf.extract_positional_profiles(model)
    extract_seconds = time.perf_counter() - start
    results = {"machine": f"{platform.machine()}, {os.cpu_count()} CPUs, torch threads {torch.get_num_threads()}"}
    results["extract_seconds"] = extract_seconds
    print(
        f"extract F̂_P of {profiles.logits.shape[0] * profiles.logits.shape[1]} heads at n={profiles.length}: "
        f"{extract_seconds:.2f} s"
    )
    flat = profiles.toeplitz.profile.flatten(0, 1)
    rng = np.random.default_rng(0)
    for num_kernels in args.kernels:
        start = time.perf_counter()
        fit = tisa_hf.fit_kernels(flat, num_kernels, window=args.window)
        fit_seconds = time.perf_counter() - start
        start = time.perf_counter()
        reference = np.array([scipy_best_r2(p.numpy(), num_kernels, args.window, args.scipy_starts, rng) for p in flat])
        scipy_seconds = time.perf_counter() - start
        gap = reference - fit.r2.double().numpy()
        row = {
            "kernels": num_kernels,
            "heads": len(flat),
            "fit_seconds": fit_seconds,
            "extract_plus_fit_seconds": extract_seconds + fit_seconds,
            "scipy_seconds": scipy_seconds,
            "mean_r2": float(fit.r2.mean()),
            "scipy_mean_r2": float(reference.mean()),
            "max_gap": float(gap.max()),
            "heads_within_0.02": int((gap <= 0.02).sum()),
        }
        results[f"S={num_kernels}"] = row
        print(
            f"S={num_kernels}: fit {fit_seconds:.2f} s (+extract {extract_seconds:.2f} s), "
            f"scipy {scipy_seconds:.1f} s; "
            f"mean R² {row['mean_r2']:.4f} vs scipy {row['scipy_mean_r2']:.4f}; worst gap {row['max_gap']:+.4f}; "
            f"{row['heads_within_0.02']}/{len(flat)} heads within 0.02"
        )
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(results, handle, indent=2)


if __name__ == "__main__":
    main()
