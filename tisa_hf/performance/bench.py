"""`tisa-hf bench`: speed and peak memory of TISA against plain attention, measured side by side in one run.

Sections (the first four by default):
- `bias`: building one layer's (H, n, n) bias, against a per-head loop with a SciPy Toeplitz index per call
  (the way the TISA reference code builds it);
- `train`: one training step (forward, backward, AdamW) of a BERT-base-shaped classifier, with and without TISA
  mode="add", for each attention implementation, shape (`--shapes`: small ones, and on CUDA fine-tuning's own:
  GLUE 32x128, SQuAD 24x384, 8x512) and attention dropout rate (`--attention-dropout`);
- `infer`: the same models in eval mode under `torch.no_grad`;
- `replace`: TISA mode="replace" inference beyond the 512-position table, against the unpatched model with its
  position table enlarged to the same length;
- `replace-train` (only when asked for): the same comparison for a training step of the classifier, as fine-tuning
  on long documents runs it;
- `long` (only when asked for): reading long inputs, batch 1 at `--long-lengths` (8,192 to 32,768 tokens): the
  packaged MiniLM with TISA replace S=5 (kernels fitted at load, or those of the saved TISA model `--long-model`)
  on its current route (`banded`) and on the blockwise route (`blockwise`), against the same MiniLM with position
  interpolation (`plain`) and reading the input as 512-token chunks in one batch (`chunk`), all four interleaved;
  each time with the fastest and slowest repeat, tokens a second, and one step's peak memory.

`--compile` adds each model of `train`, `infer`, `replace` and `replace-train` compiled with `torch.compile` (Inductor,
or `--compile-backend`): the plain and TISA models, eager and compiled, timed interleaved, each compile's wall time (its
first step) reported apart, and the compiled ratio beside the eager one. `--sdpa-backend efficient` holds PyTorch's SDPA
to its memory-efficient attention kernel, the one a Turing GPU (sm_75) runs TISA's bias on; fp16 training steps go
through a GradScaler.

`--profile` counts operator calls and splits the time of one step instead (`tisa_hf.performance.step_profile`).

Times are medians over `--repeats` runs after `--warmup` runs, with the compared variants interleaved. Peak
memory is measured per configuration in a fresh subprocess running two steps: on CUDA
`torch.cuda.max_memory_allocated` (weights, optimizer state and activations); on CPU the peak resident set
size of the steps (Linux VmHWM, reset after building the model, with glibc returning freed blocks to the OS),
which includes the Python and library baseline and the weights; `baseline_mib` is the resident set before the
first step.
"""

from __future__ import annotations

import argparse
import ctypes
import ctypes.util
import dataclasses
import gc
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import scipy.linalg
import torch

from ..common.checkpoints import CheckpointFacts
from ..common.machine import checked_device, machine
from ..common.saved_files import check_output_folder
from ..errors import UsageError
from ..kernels import TisaPositionBias, kernel_values
from .cases import (
    REPLACE_SECTIONS,
    TISA_KERNELS,
    TRAINING_SECTIONS,
    ModelCase,
    build_model,
    reference_positions,
    step_function,
    synchronize,
)
from .options import (
    BENCH_DEFAULT_SECTIONS,
    CUDA_REPLACE_LENGTHS,
    FINE_TUNING_SHAPES,
    PROFILE_SHAPE,
    REPLACE_LENGTHS,
    SMALL_SHAPES,
    bench_parser,
)

# --- bias build -------------------------------------------------------------------------------------------------


def per_head_loop_bias(amplitude: torch.Tensor, sharpness: torch.Tensor, center: torch.Tensor, length: int):
    """One layer's (1, H, n, n) bias built as the TISA reference code does: a Python loop over heads, each
    evaluating f on all 2n-1 offsets and gathering them through a SciPy Toeplitz index built on every call."""
    device = amplitude.device
    index = scipy.linalg.toeplitz(np.arange(length - 1, -1, -1), np.arange(length - 1, 2 * length - 1))
    index = torch.from_numpy(index).to(device)
    offsets = torch.arange(1 - length, length, device=device, dtype=amplitude.dtype)
    heads = []
    for head in range(amplitude.shape[0]):
        values = kernel_values(amplitude[head], sharpness[head], center[head], offsets)
        heads.append(values[index])
    return torch.stack(heads).unsqueeze(0)


def bench_bias(device: torch.device, lengths: list[int], heads: int, warmup: int, repeats: int) -> list[dict]:
    module = TisaPositionBias(1, heads, TISA_KERNELS).to(device)
    module.reset_random(window=512, generator=torch.Generator().manual_seed(0))
    params = (module.amplitude[0].detach(), module.sharpness[0].detach(), module.center[0].detach())
    rows = []
    for length in lengths:
        variants = {
            "loop": lambda length=length: per_head_loop_bias(*params, length),
            # with gradients on, the module builds (never caches), so this times the build itself
            "tisa": lambda length=length: module(0, length, torch.float32),
            # the floor: allocating and filling a tensor of the same size
            "fill": lambda length=length: torch.empty(1, heads, length, length, device=device).fill_(1.0),
        }
        times = time_interleaved(variants, device, warmup, repeats)
        rows.append({"length": length, "heads": heads, **times, "speedup": times["loop"] / times["tisa"]})
    return rows


# --- timing and memory ------------------------------------------------------------------------------------------


def time_interleaved(
    variants: dict[str, Callable[[], object]], device: torch.device, warmup: int, repeats: int
) -> dict[str, float]:
    """Median milliseconds of each variant; each round runs all of them, in alternating order."""
    samples = timed_interleaved(variants, device, warmup, repeats)
    return {name: statistics.median(values) for name, values in samples.items()}


def timed_interleaved(
    variants: dict[str, Callable[[], object]], device: torch.device, warmup: int, repeats: int
) -> dict[str, list[float]]:
    """The milliseconds of each variant's repeats; each round runs all of them, in alternating order."""
    samples: dict[str, list[float]] = {name: [] for name in variants}
    names = list(variants)
    for round_index in range(warmup + repeats):
        for name in names if round_index % 2 == 0 else reversed(names):
            synchronize(device)
            start = time.perf_counter()
            variants[name]()
            synchronize(device)
            if round_index >= warmup:
                samples[name].append(1000 * (time.perf_counter() - start))
    return samples


def peak_memory_of(case: ModelCase) -> dict[str, float]:
    """Runs `case` for two steps in a fresh subprocess and returns its peak memory in MiB."""
    spec = json.dumps(case.__dict__)
    command = [sys.executable, "-m", "tisa_hf", "bench", "--memory-worker", spec]
    package_root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    python_path = os.pathsep.join(filter(None, [package_root, os.environ.get("PYTHONPATH")]))
    # a fixed mmap threshold makes glibc hand every large freed block back, so the resident set tracks live memory
    environment = {**os.environ, "PYTHONPATH": python_path, "MALLOC_MMAP_THRESHOLD_": "65536"}
    result = subprocess.run(command, capture_output=True, text=True, check=False, env=environment)
    if result.returncode != 0:
        if ran_out_of_memory(result.returncode, result.stderr):
            raise UsageError(
                f"{case.label()} ran out of memory in its peak-memory run (the rows before it are in --output); "
                "leave out the lengths that do not fit, or skip memory with --no-memory."
            )
        raise RuntimeError(f"Memory measurement of {case.label()} failed:\n{result.stderr[-2000:]}")
    return json.loads(result.stdout.strip().splitlines()[-1])


def ran_out_of_memory(returncode: int, stderr: str) -> bool:
    """Whether a memory worker died of memory: killed by the operating system's OOM killer (SIGKILL), or PyTorch's
    allocation error ("CUDA out of memory", "DefaultCPUAllocator: not enough memory"). Any other failure is a
    bug and keeps its traceback."""
    return returncode == -signal.SIGKILL or "out of memory" in stderr or "not enough memory" in stderr


def resident_mib(field: str) -> float:
    """VmRSS (current) or VmHWM (peak since the last reset) of this process, from /proc."""
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field + ":"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def return_freed_memory(device: torch.device) -> None:
    """Hands the memory of freed tensors back to the system (glibc keeps a CPU process's freed blocks, CUDA's caching
    allocator its freed blocks on the GPU), so that the peak-memory subprocesses that follow the timing have the
    machine's memory rather than what the timed models left of it."""
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
    else:
        ctypes.CDLL(ctypes.util.find_library("c")).malloc_trim(0)


def reset_peak_resident_set() -> None:
    """Returns freed heap memory to the OS and restarts VmHWM from the current resident set (Linux >= 4.0)."""
    return_freed_memory(torch.device("cpu"))
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")


def start_peak_memory(device: torch.device) -> float:
    """Starts a peak-memory measurement on `device` and returns the MiB in use now: CUDA's allocator statistics, or
    on the CPU the process's resident set (whose high-water mark is reset)."""
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        return torch.cuda.memory_allocated(device) / 2**20
    reset_peak_resident_set()
    return resident_mib("VmRSS")


def peak_memory_mib(device: torch.device) -> float:
    """The peak MiB since `start_peak_memory`."""
    return torch.cuda.max_memory_allocated(device) / 2**20 if device.type == "cuda" else resident_mib("VmHWM")


def memory_worker(spec: str) -> int:
    """Peak memory of two steps of one case (one for `long`, whose inference step allocates the same each time):
    CUDA allocator peak, or on CPU the peak resident set of the steps."""
    case = ModelCase(**json.loads(spec))
    device = torch.device(case.device)
    model = build_model(case, reference_positions(case))
    step = step_function(case, model)
    baseline = start_peak_memory(device)
    for _ in range(1 if case.section == "long" else 2):
        step()
    synchronize(device)
    peak = peak_memory_mib(device)
    print(json.dumps({"peak_mib": peak, "baseline_mib": baseline}))
    return 0


def bench_models(
    cases: list[tuple[ModelCase, ModelCase]],
    device: torch.device,
    args: argparse.Namespace,
    rows: list[dict],
    save: Callable[[], None],
) -> None:
    """Times each (without, with TISA) pair side by side (with `--compile`, each also compiled: four variants,
    interleaved, after a first step of each compiled one whose wall time is its compile time), then measures each
    one's peak memory; appends a row to `rows` and calls `save` after each pair.

    Compiled pairs start from an empty Dynamo cache: Dynamo keys compiled code by code object, which every model
    of a run shares (transformers' forward wrappers), so earlier pairs' models would fill it to its recompile limit,
    past which Dynamo runs a frame eager with only a log warning. Reaching the limit is an error here instead."""
    with torch._dynamo.config.patch(fail_on_recompile_limit_hit=True):
        for plain_case, tisa_case in cases:
            bench_pair(plain_case, tisa_case, device, args, rows)
            save()


def bench_pair(
    plain_case: ModelCase, tisa_case: ModelCase, device: torch.device, args: argparse.Namespace, rows: list[dict]
) -> None:
    """The row of one (without, with TISA) pair: `bench_models` says what it holds."""
    print(f"  {plain_case.label()} ...", file=sys.stderr, flush=True)
    named = {"plain": plain_case, "tisa": tisa_case}
    if args.compile:
        torch._dynamo.reset()
        for name, case in list(named.items()):
            named[f"{name}_compiled"] = dataclasses.replace(case, compile_backend=args.compile_backend)
    variants = {name: step_function(case, build_model(case, reference_positions(case))) for name, case in named.items()}
    compile_seconds = {name: first_step_seconds(variants[name], device) for name in named if "compiled" in name}
    samples = timed_interleaved(variants, device, args.warmup, args.repeats)
    del variants
    return_freed_memory(device)
    row = {**{k: v for k, v in plain_case.__dict__.items() if k not in ("tisa", "compile_backend")}}
    for name, values in samples.items():
        row[name], row[f"{name}_range"] = statistics.median(values), [min(values), max(values)]
    row["time_ratio"] = row["tisa"] / row["plain"]
    if args.compile:
        row["compile_backend"] = args.compile_backend
        row["compiled_time_ratio"] = row["tisa_compiled"] / row["plain_compiled"]
        row.update({f"{name}_compile_s": seconds for name, seconds in compile_seconds.items()})
    if not args.no_memory:
        measured = [name for name in named if "compiled" not in name or device.type == "cuda"]
        memory = {name: peak_memory_of(named[name]) for name in measured}
        for name in measured:
            row[f"{name}_peak_mib"] = memory[name]["peak_mib"]
        row["baseline_mib"] = memory["plain"]["baseline_mib"]
        row["memory_ratio"] = row["tisa_peak_mib"] / row["plain_peak_mib"]
        if "tisa_compiled" in measured:
            row["compiled_memory_ratio"] = row["tisa_compiled_peak_mib"] / row["plain_compiled_peak_mib"]
    rows.append(row)


def first_step_seconds(step: Callable[[], None], device: torch.device) -> float:
    """The wall seconds of a compiled model's first step: its compile time (and the step itself)."""
    synchronize(device)
    start = time.perf_counter()
    step()
    synchronize(device)
    return time.perf_counter() - start


MODEL_SECTIONS = ("train", "infer", "replace", "replace-train")
LONG_VARIANTS = ("plain", "banded", "blockwise", "chunk")


def long_cases(args: argparse.Namespace, length: int) -> dict[str, ModelCase]:
    """`long`'s four models at one length."""
    case = ModelCase("long", "sdpa", 1, length, False, "float32", args.device, 0.0, args.long_model)
    return {
        "plain": case,
        "banded": dataclasses.replace(case, tisa=True),
        "blockwise": dataclasses.replace(case, tisa=True, banded=False),
        "chunk": dataclasses.replace(case, chunked=True),
    }


def bench_long(args: argparse.Namespace, device: torch.device, rows: list[dict], save: Callable[[], None]) -> None:
    """Times `long`'s four models side by side at each length (each model built once a length), then measures
    each one's peak memory; appends a row to `rows` and calls `save` after each length."""
    for length in args.long_lengths:
        print(f"  long 1x{length} ...", file=sys.stderr, flush=True)
        cases = long_cases(args, length)
        models = {name: build_model(case) for name, case in cases.items() if name != "blockwise"}
        models["blockwise"] = models["banded"]  # the same model; only the route differs
        variants = {name: step_function(case, models[name]) for name, case in cases.items()}
        samples = timed_interleaved(variants, device, args.warmup, args.repeats)
        del models, variants
        return_freed_memory(device)
        row: dict[str, Any] = {"length": length, "model": args.long_model or "packaged MiniLM, fitted kernels"}
        for name in LONG_VARIANTS:
            row[name] = statistics.median(samples[name])
            row[f"{name}_range"] = [min(samples[name]), max(samples[name])]
            row[f"{name}_tokens_per_s"] = length / (row[name] / 1000)
        for name in LONG_VARIANTS[1:]:
            row[f"{name}_time_ratio"] = row[name] / row["plain"]
        if not args.no_memory:
            for name in LONG_VARIANTS:
                memory = peak_memory_of(cases[name])
                row[f"{name}_peak_mib"] = memory["peak_mib"]
            row["baseline_mib"] = memory["baseline_mib"]
            for name in LONG_VARIANTS[1:]:
                row[f"{name}_memory_ratio"] = row[f"{name}_peak_mib"] / row["plain_peak_mib"]
        rows.append(row)
        save()


def model_cases(args: argparse.Namespace, section: str, dtype: str) -> list[tuple[ModelCase, ModelCase]]:
    """The (without, with TISA) pairs of a section in one dtype: each architecture, implementation, shape and (in
    training) attention dropout rate. `replace` and `replace-train` read one input of each length, on the
    implementations that have a route past the position table (eager has none: it builds the full bias)."""
    if section in REPLACE_SECTIONS:
        shapes = [(1, length) for length in args.replace_lengths]
        implementations = [name for name in args.implementations if name != "eager"]
    else:
        shapes = args.shapes
        implementations = args.implementations
    dropouts = args.attention_dropout if section in TRAINING_SECTIONS else [0.0]
    settings = {"sdpa_backend": args.sdpa_backend, "layers": args.layers}
    return [
        tuple(
            ModelCase(
                section, implementation, batch, length, tisa, dtype, args.device, dropout, **settings, architecture=name
            )
            for tisa in (False, True)
        )
        for name in args.architectures
        for implementation in implementations
        for batch, length in shapes
        for dropout in dropouts
    ]


# --- report -----------------------------------------------------------------------------------------------------


def format_table(results: dict) -> str:
    lines = []
    if results.get("bias"):
        lines += [
            "bias build, one layer (ms; fill = allocating and filling a tensor of that size)",
            f"{'n':>6} {'loop':>10} {'tisa':>10} {'fill':>10} {'speedup':>9}",
        ]
        lines += [
            f"{row['length']:>6} {row['loop']:>10.2f} {row['tisa']:>10.3f} {row['fill']:>10.3f} {row['speedup']:>8.1f}x"
            for row in results["bias"]
        ]
    model_rows = [row for section in MODEL_SECTIONS for row in results.get(section, [])]
    if model_rows:
        header = f"{'section':<13} {'model':<10} {'attn':<6} {'shape':>9} {'dtype':<9} {'drop':>4}"
        header += f" {'plain ms':>9} {'tisa ms':>9}"
        header += f" {'ratio':>6} {'plain MiB':>10} {'tisa MiB':>9} {'ratio':>6}"
        lines += ["", header]
        for row in model_rows:
            line = f"{row['section']:<13} {row['architecture']:<10} {row['implementation']:<6} "
            line += f"{row['batch']:>3}x{row['length']:<5} "
            line += f"{row['dtype']:<9} {row['dropout']:>4g} {row['plain']:>9.1f} {row['tisa']:>9.1f}"
            line += f" {row['time_ratio']:>6.3f}"
            if "memory_ratio" in row:
                line += f" {row['plain_peak_mib']:>10.0f} {row['tisa_peak_mib']:>9.0f} {row['memory_ratio']:>6.3f}"
            lines.append(line)
            if "compiled_time_ratio" in row:
                line = f"{'':<13} {'':<10} {'compiled':<31} {row['plain_compiled']:>9.1f} {row['tisa_compiled']:>9.1f}"
                line += f" {row['compiled_time_ratio']:>6.3f}"
                if "compiled_memory_ratio" in row:
                    line += f" {row['plain_compiled_peak_mib']:>10.0f} {row['tisa_compiled_peak_mib']:>9.0f}"
                    line += f" {row['compiled_memory_ratio']:>6.3f}"
                line += f"  (compile {row['plain_compiled_compile_s']:.0f} s / {row['tisa_compiled_compile_s']:.0f} s)"
                lines.append(line)
    if results.get("long"):
        peak = "peak memory allocated" if results["machine"]["device"] == "cuda" else "peak resident set"
        lines += ["", f"long inputs, batch 1, inference (ms: median [fastest, slowest]; MiBs: {peak})"]
        for row in results["long"]:
            line = f"{row['length']:>6}"
            for name in LONG_VARIANTS:
                low, high = row[f"{name}_range"]
                line += f"  {name} {row[name]:.0f} [{low:.0f}, {high:.0f}]"
                if name != "plain":
                    line += f" {row[f'{name}_time_ratio']:.3f}x"
                line += f" {row[f'{name}_tokens_per_s']:.0f} tok/s"
            lines.append(line)
            if "plain_peak_mib" in row:
                memory = "        " + "  ".join(f"{name} {row[f'{name}_peak_mib']:.0f} MiB" for name in LONG_VARIANTS)
                ratios = (f"{row[f'{name}_memory_ratio']:.3f}" for name in LONG_VARIANTS[1:])
                memory += "  ratios " + " / ".join(ratios)
                lines.append(memory)
    return "\n".join(lines)


def machine_description(device: torch.device) -> dict[str, Any]:
    """The machine as runs record it (`environment.machine`), with the platform and torch's version."""
    return {"platform": platform.platform(), "torch": torch.__version__, **machine(device)}


def check_output(path: str) -> None:
    """--output can be written, before minutes of timing (its folder is created when missing)."""
    output = Path(path)
    if output.is_dir():
        raise UsageError(f"--output {output} is a folder; give a file path such as bench.json.")
    check_output_folder(output.parent, f"--output {output}: its folder")
    output.parent.mkdir(parents=True, exist_ok=True)


def check_long_model(name: str) -> None:
    """--long-model is a TISA `replace` model, read from its config before any model loads: `long` times it as
    TISA on both routes against the plain MiniLM, and a model with a position table fails past its length."""
    facts = CheckpointFacts.read(name, "--long-model")
    if not facts.any_length:
        what = f"TISA mode='{facts.tisa.mode}'" if facts.tisa else "no TISA"
        raise UsageError(
            f"--long-model {name} has a position table of {facts.table_length} positions ({what}); the long "
            "section needs a saved TISA replace model (such as tisa-hf adapt writes), or leave --long-model out "
            "for the packaged MiniLM with replace kernels fitted at load."
        )


def parse_args(argv: list[str]) -> argparse.Namespace:
    """The options, checked: the device can be used, the output written and the long section's model read."""
    args = bench_parser().parse_args(argv)
    args.device = str(checked_device(args.device))
    if args.sdpa_backend == "efficient" and torch.device(args.device).type != "cuda":
        raise UsageError("--sdpa-backend efficient is a CUDA kernel; give --device cuda, or leave the option out.")
    if not args.memory_worker:
        check_output(args.output)
    cuda = torch.device(args.device).type == "cuda"
    if args.dtypes is None:
        args.dtypes = ["float32", "bfloat16"] if cuda else ["float32"]
    if args.shapes is None:
        args.shapes = [PROFILE_SHAPE] if args.profile else [*SMALL_SHAPES, *(FINE_TUNING_SHAPES if cuda else ())]
    if args.replace_lengths is None:
        args.replace_lengths = list(CUDA_REPLACE_LENGTHS if cuda else REPLACE_LENGTHS)
    if args.implementations is None:
        args.implementations = ["sdpa", "eager"] + (["fused"] if cuda else [])
    if "fused" in args.implementations and not cuda:
        raise UsageError(
            "--implementations fused times the fused TISA kernel, which runs on CUDA GPUs: give --device cuda, or "
            "leave fused out."
        )
    only_eager = set(args.implementations) <= {"eager"}
    if args.sections is None:  # the default sections, less replace where no implementation can read past the table
        args.sections = [section for section in BENCH_DEFAULT_SECTIONS if not (only_eager and section == "replace")]
    replace_sections = [section for section in args.sections if section in REPLACE_SECTIONS]
    if replace_sections and only_eager:
        raise UsageError(
            f"--sections {' '.join(replace_sections)} reads past the position table, which eager attention does not "
            "time (it builds every layer's full bias): add sdpa to --implementations."
        )
    if "long" in args.sections and args.long_model:
        check_long_model(args.long_model)
    check_architectures(args)
    return args


def check_architectures(args: argparse.Namespace) -> None:
    """--architectures other than BERT are timed by the model sections alone (`--profile` and `long` time BERT and
    the packaged MiniLM)."""
    others = [name for name in args.architectures if name != "bert"]
    if others and args.profile:
        raise UsageError(
            f"--architectures {' '.join(others)}: --profile profiles BERT's step; leave --architectures out, or "
            "--profile out to time them."
        )
    if others and not set(args.sections) & set(MODEL_SECTIONS):
        raise UsageError(
            f"--architectures {' '.join(others)} are timed by the sections {', '.join(MODEL_SECTIONS)}; add one of "
            "them to --sections (long reads the packaged MiniLM)."
        )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.memory_worker:
        return memory_worker(args.memory_worker)
    device = torch.device(args.device)
    results: dict = {"machine": machine_description(device), "settings": {k: v for k, v in vars(args).items()}}

    def save() -> None:
        with open(args.output, "w") as handle:
            json.dump(results, handle, indent=2)

    if args.profile:
        from .step_profile import run_profile  # it builds on this module's models and steps

        results["profile"] = run_profile(args)
        save()
        print(f"\nwrote {args.output}", file=sys.stderr)
        return 0

    if "bias" in args.sections:
        print("bias build ...", file=sys.stderr, flush=True)
        results["bias"] = bench_bias(device, args.bias_lengths, 12, args.warmup, max(args.repeats, 5))
        save()
    for section in MODEL_SECTIONS:
        if section in args.sections:
            print(f"{section} ...", file=sys.stderr, flush=True)
            cases = [pair for dtype in args.dtypes for pair in model_cases(args, section, dtype)]
            results[section] = []
            bench_models(cases, device, args, results[section], save)
    if "long" in args.sections:
        print("long ...", file=sys.stderr, flush=True)
        results["long"] = []
        bench_long(args, device, results["long"], save)
    print(format_table(results))
    print(f"\nwrote {args.output}", file=sys.stderr)
    return 0
