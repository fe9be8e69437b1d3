"""`tisa-hf env`: this machine, and the attention route each TISA configuration takes on it.

The routes come from the attention code itself: its policy chooses the route of a call on stand-in tensors of the
configuration's shapes, dtypes and grad mode, and the route describes itself (with PyTorch's own SDPA backend
choice); flex attention's refusals are its own (`attention.flex`): the report cannot drift from what a model does.
A CUDA training call is also described from PyTorch's rules (`cuda_training_routes`), so that a CPU can say it.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

import torch

from ..attention import FUSED, STORED_BIAS, SdpaCall
from ..attention.flex import flex_refusal, flex_refusal_for
from ..attention.fused.limits import BF16_FROM, MAX_HEAD_DIM, PIPELINED_FROM
from ..attention.policy import DEFAULT_SDPA_POLICY, FUSED_OPT_IN_HOW, NAMED_SDPA_POLICIES, call_policy, passed_over
from ..common.machine import checked_device, machine
from ..fitting import thread_share
from ..kernels import TisaPositionBias


@dataclass(frozen=True)
class Phase:
    """Training (gradients, and the attention dropout it runs with) or inference."""

    name: str
    training: bool
    dropout: float = 0.0


PHASES = (Phase("train", True, 0.1), Phase("train, dropout 0", True), Phase("inference", False))


@dataclass(frozen=True)
class Shape:
    """The model whose attention is routed: layers and heads (the eval-mode bias cache holds all layers) and the
    head size."""

    layers: int = 12
    heads: int = 12
    head_dim: int = 64


def precisions(device: torch.device) -> list[torch.dtype | None]:
    """float32 (None: no autocast), bfloat16 autocast, and float16 autocast on CUDA."""
    return [None, torch.bfloat16] + ([torch.float16] if device.type == "cuda" else [])


def _grad_mode(training: bool):
    return torch.enable_grad() if training else torch.no_grad()


def _autocast(device: torch.device, dtype: torch.dtype | None):
    return torch.autocast(device.type, dtype=dtype) if dtype is not None else contextlib.nullcontext()


@dataclass(frozen=True)
class RouteReport:
    """The route a call takes (with PyTorch's SDPA backend where it has one), and "route: why not" for each route
    tried before it, in the policy's order, from the routes' own refusals."""

    chosen: str
    passed_over: tuple[str, ...] = ()


def route(
    implementation: str, phase: Phase, length: int, shape: Shape, device: torch.device, autocast: torch.dtype | None
) -> RouteReport:
    """The route of one TISA attention call ("trainable-bias SDPA (flash)", "refused: ...") and the routes passed
    over, for stand-in kernels that are nonzero at every offset (f = 1: the banded route, which takes layers whose
    f(k) is 0 outside a band, says so in its refusal)."""
    kernels = TisaPositionBias(shape.layers, shape.heads, 1).to(device)
    with torch.no_grad():
        kernels.amplitude.fill_(1.0)
    # A query as transformers hands it over: in autocast's dtype where autocast is on (the projections ran under it).
    query = torch.empty(1, shape.heads, length, shape.head_dim, dtype=autocast or torch.float32, device=device)
    with _grad_mode(phase.training), _autocast(device, autocast):
        if implementation == "eager":
            return RouteReport("eager attention, stored bias")
        if implementation == "flex_attention":
            refusal = flex_refusal(kernels, query, phase.dropout)
            return RouteReport("refused: " + refusal.split(":")[0] if refusal else "flex, offset table in score_mod")
        call = SdpaCall(query, query, query, None, phase.dropout, None, kernels, 0)
        policy = call_policy()
        reasons = tuple(f"{route.name}: {refusal}" for route, refusal in passed_over(policy, call))
        return RouteReport(policy.choose(call).describe(call), reasons)


# On CUDA GPUs of compute capability 8 and above, PyTorch's memory-efficient SDPA kernel needs the head size to be a
# multiple of 128 bits' worth of elements (sdp_utils.cpp, `minimum_gemm_alignment`); otherwise SDPA falls back to math.
EFFICIENT_ALIGNMENT_BITS = 128


def cuda_training_routes(head_dim: int, dtype: torch.dtype, dropout: float) -> dict[str, str]:
    """The route a CUDA training call of TISA takes on each attention implementation, and why, from PyTorch's rules
    (`tisa_sdpa` always stores the bias in training: its blockwise route is for inference, its trainable-bias
    route for the CPU), so a machine without a GPU can say it."""
    alignment = EFFICIENT_ALIGNMENT_BITS // (8 * dtype.itemsize)
    if head_dim % alignment:
        backend = (
            f"math: the memory-efficient kernel needs heads of a multiple of {alignment} {str(dtype)[6:]} values, "
            f"these have {head_dim}"
        )
    else:
        backend = (
            "memory-efficient, which returns the bias gradient"
            + (" and has dropout" if dropout else "")
            + "; the flash kernel takes no bias"
        )
    refusal = flex_refusal_for("cuda", head_dim, dropout, trains_kernels=True)
    flex = "refused: " + refusal.split(":")[0] if refusal else "flex, offset table in score_mod (no (H, n, n) bias)"
    return {"sdpa": f"{STORED_BIAS.name} ({backend})", "flex_attention": flex}


# Compute capabilities of the GPUs users train on, by PyTorch's rules (sdp_utils.cpp): the memory-efficient SDPA kernel
# (the one that takes TISA's bias and returns its gradient) runs from 5.0, FlashAttention-2 (no bias) and bf16 from
# 8.0; flex attention does not run below 8.0 (pytorch#164813).
GPU_GENERATIONS = (
    ((7, 5), "Turing: RTX 2080, T4"),
    ((8, 0), "Ampere: A100"),
    ((8, 6), "Ampere: RTX 3090, A10"),
    ((8, 9), "Ada: RTX 4090, L4"),
    ((9, 0), "Hopper: H100, H200"),
)
FLEX_FROM = (8, 0)


def capability_route(capability: tuple[int, int]) -> str:
    """What a TISA model runs on, on a CUDA GPU of this compute capability."""
    precisions = "fp32 or fp16" + (" or bf16" if capability >= BF16_FROM else " (no bf16)")
    flex = "offset table in score_mod" if capability >= FLEX_FROM else "not available"
    tiles = "1 pipeline stage" if capability < PIPELINED_FROM else "2 pipeline stages"
    return (
        f"sdpa: {STORED_BIAS.name} on the memory-efficient kernel, {precisions}; flex attention: {flex}; "
        f"{FUSED.name}: {precisions}, heads up to {MAX_HEAD_DIM}, {tiles}, in the fused policy"
    )


def route_table(
    device: torch.device, lengths: list[int], shape: Shape = Shape()
) -> list[tuple[str, str, str, list[RouteReport]]]:
    """(attention, precision, phase, route per length) for every configuration on `device`."""
    rows = []
    for implementation in ("sdpa", "eager", "flex_attention"):
        for autocast in precisions(device):
            precision = f"{autocast} autocast".replace("torch.", "") if autocast else "float32"
            for phase in PHASES:
                reports = [route(implementation, phase, length, shape, device, autocast) for length in lengths]
                rows.append((implementation, precision, phase.name, reports))
    return rows


def describe_environment(device: torch.device) -> list[str]:
    """The machine in lines: torch, the device, CUDA and bf16, and the CPU threads (with a kernel fit's share)."""
    record = machine(device)
    cuda = torch.cuda.is_available()
    lines = [
        f"torch {torch.__version__} (CUDA {torch.version.cuda or 'not built'}), device {device}",
        f"CPU: {record['processor']}, {os.cpu_count()} cores, {len(os.sched_getaffinity(0))} usable by this process, "
        f"vector capability {torch.backends.cpu.get_cpu_capability()}",
        f"torch threads: {torch.get_num_threads()} intra-op, {torch.get_num_interop_threads()} inter-op; a kernel "
        f"fit uses at most {thread_share()} (LOCAL_WORLD_SIZE={os.environ.get('LOCAL_WORLD_SIZE', 'unset')})",
    ]
    if cuda:
        gpus = ", ".join(torch.cuda.get_device_name(index) for index in range(torch.cuda.device_count()))
        lines.append(f"CUDA: {gpus}; bf16 {'supported' if torch.cuda.is_bf16_supported() else 'not supported'}")
    else:
        lines.append("CUDA: not available")
    return lines


def main(argv: list[str] | None = None) -> int:
    from .options import env_parser

    args = env_parser().parse_args(argv)
    device = checked_device(args.device)
    shape = Shape(args.layers, args.heads, args.head_dim)
    print("\n".join(describe_environment(device)))
    print(
        f"\nroute of a TISA attention call by input length, for {shape.layers} layers x {shape.heads} heads of "
        f"{shape.head_dim} and kernels nonzero at every offset (PyTorch's SDPA backend in brackets), and why each "
        "route tried before it did not apply:"
    )
    default = next(name for name, policy in NAMED_SDPA_POLICIES.items() if policy is DEFAULT_SDPA_POLICY)
    print(f"  (the {default} policy, the default; the fused policy: {FUSED_OPT_IN_HOW})")
    for implementation, precision, phase, reports in route_table(device, args.lengths, shape):
        print(f"  {implementation}, {precision}, {phase}:")
        print("\n".join(f"    {line}" for line in grouped(args.lengths, reports)))
    print(
        "\nroute of a TISA call (training, and inference within the bias cache) by GPU compute capability, by "
        "PyTorch's rules:"
    )
    here = torch.cuda.get_device_capability(device) if device.type == "cuda" else None
    for capability, generation in GPU_GENERATIONS:
        mark = "  (this GPU)" if here == capability else ""
        print(f"  sm_{capability[0]}{capability[1]} ({generation}): {capability_route(capability)}{mark}")
    print(f"\nroute of a CUDA training call at any length, by PyTorch's rules (heads of {shape.head_dim}):")
    for dtype in (torch.float32, torch.bfloat16, torch.float16):
        for dropout in (0.1, 0.0):
            for implementation, chosen in cuda_training_routes(shape.head_dim, dtype, dropout).items():
                print(f"  {implementation}, {str(dtype)[6:]}, attention dropout {dropout}: {chosen}")
    return 0


def grouped(lengths: list[int], reports: list[RouteReport]) -> list[str]:
    """ "128, 512: route A" with its passed-over routes indented below it: lengths that take the same route, for the
    same reasons, named once."""
    groups: dict[RouteReport, list[str]] = {}
    for length, report in zip(lengths, reports, strict=True):
        groups.setdefault(report, []).append(str(length))
    return [
        line
        for report, group in groups.items()
        for line in (f"{', '.join(group)}: {report.chosen}", *(f"  not {passed}" for passed in report.passed_over))
    ]
