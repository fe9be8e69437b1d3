"""Long inputs on one attention layer: TISA's flex route (offset table in the score modification) against SDPA
with the stored (1, H, n, n) bias, and the blockwise SDPA route, in time and peak memory.

A MiniLM-sized layer (12 heads of 32, batch 1) at `--lengths` tokens. Inference compares all three routes;
training (forward and backward to the kernels and the query, key and value) compares stored-bias SDPA with the
trainable-bias route, and flex attention where it has a backward (CUDA; PyTorch has none on CPU). Times are
medians of `--repeats` interleaved rounds after a warm-up (which includes flex attention's compilation); peak
memory is measured per route in a fresh process (CUDA allocator peak, or on CPU the peak resident set of one call
above the resident set before it, so the weights and libraries are left out).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable

import torch
import torch.nn.functional as F

from tisa_hf.attention import blockwise, flex, trainable_bias
from tisa_hf.kernels import TisaPositionBias
from tisa_hf.performance.bench import peak_memory_mib, start_peak_memory, time_interleaved
from tisa_hf.performance.cases import synchronize

HEADS, HEAD_DIM, KERNELS = 12, 32, 5


def route_call(route: str, length: int, training: bool, device: torch.device) -> Callable[[], None]:
    """One attention call (and its backward when training) of `route` on fresh random inputs of `length`."""
    generator = torch.Generator().manual_seed(0)
    kernels = TisaPositionBias(1, HEADS, KERNELS)
    kernels.reset_random(64, generator=generator)
    kernels.to(device).requires_grad_(training)
    query, key, value = (
        torch.randn(1, HEADS, length, HEAD_DIM, generator=generator).to(device).requires_grad_(training)
        for _ in range(3)
    )

    def run() -> None:
        with torch.set_grad_enabled(training):
            if route == "stored":
                bias = kernels._build(0, length, torch.float32)
                if training and device.type == "cpu":
                    output = trainable_bias.TrainableBiasAttention.apply(query, key, value, bias, HEAD_DIM**-0.5)
                else:
                    output = F.scaled_dot_product_attention(query, key, value, attn_mask=bias)
            elif route == "blockwise":
                bias = blockwise.ToeplitzBias(kernels.offset_table(0, length, torch.float32), length)
                output = blockwise.blockwise_biased_sdpa(query, key, value, None, bias, 0.0, None)
            else:
                table = kernels.offset_table(0, length, torch.float32)
                output = flex.offset_table_flex_attention(query, key, value, None, table, None, training)
            if training:
                output.square().mean().backward()

    return run


def routes_for(training: bool, device: torch.device) -> list[str]:
    if not training:
        return ["stored", "blockwise", "flex"]
    return ["stored"] + (["flex"] if device.type == "cuda" else [])


def memory_worker(route: str, length: int, training: bool, device: torch.device) -> None:
    call = route_call(route, length, training, device)
    call()  # warm-up, flex attention's compilation included
    synchronize(device)
    before = start_peak_memory(device)
    call()
    synchronize(device)
    peak = peak_memory_mib(device)
    print(json.dumps({"peak_mib": peak - before}))


def peak_memory(route: str, length: int, training: bool, device: torch.device) -> float:
    command = [sys.executable, __file__, "--memory-worker", route, str(length), str(int(training)), str(device)]
    environment = {"MALLOC_MMAP_THRESHOLD_": "65536"}  # freed blocks go back to the OS, as in tisa-hf bench
    result = subprocess.run(command, capture_output=True, text=True, check=True, env={**os.environ, **environment})
    return json.loads(result.stdout.strip().splitlines()[-1])["peak_mib"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--lengths", nargs="+", type=int, default=[2048, 8192])
    parser.add_argument("--train-lengths", nargs="+", type=int, default=[2048], help="training is n² in memory")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--no-memory", action="store_true")
    parser.add_argument("--json", help="write the results here")
    parser.add_argument("--memory-worker", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_worker:
        route, length, training, device = args.memory_worker
        memory_worker(route, int(length), bool(int(training)), torch.device(device))
        return
    device = torch.device(args.device)
    print(f"torch {torch.__version__}, {device}, {torch.get_num_threads()} threads; {HEADS} heads of {HEAD_DIM}")
    print(f"{'phase':>9} {'n':>6} {'route':>9} {'ms':>10} {'peak MiB':>9}")
    rows = []
    for training, lengths in ((False, args.lengths), (True, args.train_lengths)):
        for length in lengths:
            names = routes_for(training, device)
            calls = {name: route_call(name, length, training, device) for name in names}
            times = time_interleaved(calls, device, warmup=1, repeats=args.repeats)
            del calls
            for name in names:
                peak = None if args.no_memory else peak_memory(name, length, training, device)
                phase = "train" if training else "inference"
                rows.append({"phase": phase, "length": length, "route": name, "ms": times[name], "peak_mib": peak})
                shown = "-" if peak is None else f"{peak:.0f}"
                print(f"{phase:>9} {length:>6} {name:>9} {times[name]:10.1f} {shown:>9}", flush=True)
    if args.json:
        with open(args.json, "w") as handle:
            json.dump(rows, handle, indent=2)


if __name__ == "__main__":
    main()
