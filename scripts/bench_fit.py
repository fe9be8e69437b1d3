"""Kernel-fit benchmark on the packaged MiniLM: tisa-hf's batched fit against scipy's least_squares.

Prints, per S, the wall time of extracting and fitting all heads, and how the fit R² of each head compares
with the best of `--scipy-starts` random starts of `scipy.optimize.least_squares` on the same profile.

`--concurrency N` measures instead how the fit behaves beside others: the same fit in one process alone and in N
processes at once (started together once each has imported torch), with torch's threads as it chooses them
(`unbounded`: no LOCAL_WORLD_SIZE, as before the fit bounded its threads) and with LOCAL_WORLD_SIZE=N, as a
launcher of N processes sets it (`bounded`: each fit then runs on its share of the cores). The settings and
rounds are interleaved; it prints the median fit times, their ratios, and whether every fit gave the same
kernels bit for bit.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from safetensors import safe_open
from safetensors.torch import load_file, save_file
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


FIT_FIELDS = ("amplitude", "sharpness", "center", "constant", "r2")


def fit_worker(profiles_file: str, num_kernels: int, window: int, result_file: str) -> None:
    """One process of `--concurrency`: says it is ready, waits for the start line, fits, and saves the kernels
    and its fit time and threads."""
    profiles = load_file(profiles_file)["profiles"]
    print("ready", flush=True)
    sys.stdin.readline()
    seen_threads = []
    original = tisa_hf.fitting._levenberg_marquardt

    def counting(*args):
        seen_threads.append(torch.get_num_threads())
        return original(*args)

    tisa_hf.fitting._levenberg_marquardt = counting
    start = time.perf_counter()
    fit = tisa_hf.fit_kernels(profiles, num_kernels, window=window)
    seconds = time.perf_counter() - start
    tensors = {name: getattr(fit, name).contiguous() for name in FIT_FIELDS}
    save_file(tensors, result_file, metadata={"seconds": repr(seconds), "threads": str(max(seen_threads))})


def run_fits(profiles_file: Path, processes: int, bounded: int | None, args, folder: Path, tag: str) -> list[dict]:
    """`processes` fits at once, each in its own process; LOCAL_WORLD_SIZE=`bounded` where given."""
    env = {key: value for key, value in os.environ.items() if key != "LOCAL_WORLD_SIZE"}
    if bounded:
        env["LOCAL_WORLD_SIZE"] = str(bounded)
    workers, files = [], [folder / f"{tag}-{index}.safetensors" for index in range(processes)]
    for result_file in files:
        command = [sys.executable, __file__, "--worker", str(profiles_file), str(result_file)]
        command += ["--kernels", str(args.kernels[0]), "--window", str(args.window)]
        workers.append(subprocess.Popen(command, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True))
    for worker in workers:
        assert worker.stdout.readline().strip() == "ready"
    for worker in workers:
        worker.stdin.write("go\n")
        worker.stdin.flush()
    for worker in workers:
        if worker.wait() != 0:
            raise SystemExit(f"a fit worker failed (exit status {worker.returncode})")
    results = []
    for result_file in files:
        with safe_open(result_file, "pt") as handle:
            metadata = handle.metadata()
            tensors = {name: handle.get_tensor(name) for name in FIT_FIELDS}
        results.append({"seconds": float(metadata["seconds"]), "threads": int(metadata["threads"]), **tensors})
    return results


def concurrency_benchmark(args, flat: torch.Tensor) -> dict:
    """Fit times alone and with `args.concurrency` at once, unbounded and bounded threads, interleaved."""
    settings = {"unbounded": None, "bounded": args.concurrency}
    times = {(name, processes): [] for name in settings for processes in (1, args.concurrency)}
    threads, fits = {}, []
    with tempfile.TemporaryDirectory() as folder:
        profiles_file = Path(folder) / "profiles.safetensors"
        save_file({"profiles": flat.contiguous()}, profiles_file)
        for round_index in range(args.rounds):
            order = list(settings) if round_index % 2 == 0 else list(settings)[::-1]
            for name in order:
                for processes in (1, args.concurrency):
                    tag = f"{name}-{processes}-{round_index}"
                    results = run_fits(profiles_file, processes, settings[name], args, Path(folder), tag)
                    times[name, processes].append(statistics.median(r["seconds"] for r in results))
                    threads[name, processes] = sorted({r["threads"] for r in results})
                    fits += results
                    print(
                        f"round {round_index + 1}: {name:>9}, {processes} at once: {times[name, processes][-1]:.2f} s",
                        flush=True,
                    )
    identical = all(torch.equal(fit[field], fits[0][field]) for fit in fits for field in FIT_FIELDS)
    print(
        f"\nS={args.kernels[0]}, {len(flat)} profiles, {len(os.sched_getaffinity(0))} cores; median over "
        f"{args.rounds} rounds of each process's fit time (s)"
    )
    print(f"{'threads':>10} {'per fit':>8} {'alone':>8} {f'{args.concurrency} at once':>10} {'ratio':>7}")
    rows = {}
    for name in settings:
        alone = statistics.median(times[name, 1])
        together = statistics.median(times[name, args.concurrency])
        rows[name] = {
            "alone_s": times[name, 1],
            "together_s": times[name, args.concurrency],
            "threads_alone": threads[name, 1],
            "threads_together": threads[name, args.concurrency],
        }
        used = "/".join(map(str, threads[name, args.concurrency]))
        print(f"{name:>10} {used:>8} {alone:8.2f} {together:10.2f} {together / alone:6.2f}x")
    print(f"every fit gave the same kernels bit for bit: {identical}")
    return {"concurrency": args.concurrency, "rounds": args.rounds, "identical": identical, **rows}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--model", default="minilm", help="model path or Hub id (default: the packaged MiniLM)")
    parser.add_argument("--kernels", type=int, nargs="+", default=[5])
    parser.add_argument("--window", type=int, default=tisa_hf.TisaConfig().fit_window)
    parser.add_argument("--scipy-starts", type=int, default=20)
    parser.add_argument("--concurrency", type=int, default=0, help="fits at once to compare with one alone")
    parser.add_argument("--rounds", type=int, default=3, help="rounds of the --concurrency comparison")
    parser.add_argument("--profiles", type=int, help="fit only the first N heads' profiles (default: all)")
    parser.add_argument("--json", default=None, help="write the results here")
    parser.add_argument("--worker", nargs=2, metavar=("PROFILES", "RESULT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        fit_worker(args.worker[0], args.kernels[0], args.window, args.worker[1])
        return
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
    flat = profiles.toeplitz.profile.flatten(0, 1)[: args.profiles]
    if args.concurrency:
        results["fits_at_once"] = concurrency_benchmark(args, flat)
        args.kernels = []
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
