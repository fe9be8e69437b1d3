"""Where the banded route's time goes, in one MiniLM-sized attention layer (12 heads of 32, batch 1, no padding).

For each of `--lengths`: random queries, keys and values, and one Gaussian a head (amplitude 3, width `--sigma`,
centre uniform in ±`--spread`) set to exactly 0 where it underflows below 1e-30, as fitted and adapted kernels do.
Times, one piece after another (median of `--repeats` after 3 warm-ups; milliseconds): plain SDPA, the fused call
that also returns the log-sum-exp over all keys, each of the route's two causal calls (keys left of the band, and
right of it on reversed copies), the band's call, the whole route, and the blockwise route; and the largest
difference between the banded and blockwise outputs.

    PYTHONPATH=. python scripts/bench_banded.py --device cuda
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import torch

from tisa_hf.attention import blockwise
from tisa_hf.attention.banded import log_sum_exp
from tisa_hf.attention.banded import sdpa as banded
from tisa_hf.kernels import nonzero_band
from tisa_hf.performance.cases import synchronize

HEADS, HEAD_DIM = 12, 32


def median_ms(call: Callable[[], object], device: torch.device, repeats: int) -> float:
    for _ in range(3):
        call()
    samples = []
    for _ in range(repeats):
        synchronize(device)
        start = time.perf_counter()
        call()
        synchronize(device)
        samples.append(1000 * (time.perf_counter() - start))
    return statistics.median(samples)


def gaussian_band(length: int, sigma: float, spread: float, device: torch.device) -> torch.Tensor:
    """(heads, 2n-1) offset table: one Gaussian a head, exactly 0 where it is below 1e-30."""
    generator = torch.Generator().manual_seed(0)
    offsets = torch.arange(1 - length, length, dtype=torch.float32)
    centres = torch.empty(HEADS, 1).uniform_(-spread, spread, generator=generator)
    values = 3 * torch.exp(-((offsets - centres) ** 2) / (2 * sigma**2))
    return torch.where(values.abs() < 1e-30, torch.zeros_like(values), values).to(device)


def measure(length: int, args: argparse.Namespace, device: torch.device) -> str:
    generator = torch.Generator().manual_seed(1)
    query, key, value = (
        torch.randn(1, length, HEADS, HEAD_DIM, generator=generator).to(device).transpose(1, 2) for _ in range(3)
    )
    values = gaussian_band(length, args.sigma, args.spread, device)
    low, high = nonzero_band(values)
    low, high = min(low, 0), max(high, 0)
    left, right = 1 - low, 1 + high
    pieces = {
        "plain": lambda: torch.nn.functional.scaled_dot_product_attention(query, key, value),
        "fused+lse": lambda: log_sum_exp.attention_with_log_sum_exp(query, key, value),
        "causal left": lambda: log_sum_exp.attention_with_log_sum_exp(
            query[:, :, left:], key[:, :, : length - left], value[:, :, : length - left], is_causal=True
        ),
        "causal right": lambda: log_sum_exp.attention_with_log_sum_exp(
            query[:, :, : length - right].flip(2),
            key[:, :, right:].flip(2),
            value[:, :, right:].flip(2),
            is_causal=True,
        ),
        "band": lambda: banded.band_attention(query, key, value, values, low, high, HEAD_DIM**-0.5),
        "banded": lambda: banded.banded_biased_sdpa(query, key, value, None, values, None, (low, high)),
        "blockwise": lambda: blockwise.blockwise_biased_sdpa(
            query, key, value, None, blockwise.ToeplitzBias(values, length), 0.0, None
        ),
    }
    times = {name: median_ms(call, device, args.repeats) for name, call in pieces.items()}
    difference = (pieces["banded"]() - pieces["blockwise"]()).abs().max().item()
    line = f"n={length} band=({low}, {high}) " + " ".join(f"{name} {ms:.2f}" for name, ms in times.items())
    return line + f" banded/plain {times['banded'] / times['plain']:.2f}x max|banded - blockwise| {difference:.1e}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--lengths", type=int, nargs="+", default=[4096, 8192, 16384])
    parser.add_argument("--sigma", type=float, default=25.0)
    parser.add_argument("--spread", type=float, default=100.0)
    parser.add_argument("--repeats", type=int, default=10)
    args = parser.parse_args()
    device = torch.device(args.device)
    with torch.no_grad():
        for length in args.lengths:
            print(measure(length, args, device), flush=True)


if __name__ == "__main__":
    main()
