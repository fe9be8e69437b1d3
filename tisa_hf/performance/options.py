"""The options of `tisa-hf bench` and `tisa-hf env`; light (argparse only), so that `--help` answers without
importing torch."""

from __future__ import annotations

import argparse

from ..common.options import add_device_argument, dropout_rate, non_negative_int, positive_int

BENCH_SECTIONS = ("bias", "train", "infer", "replace", "long")
BENCH_DEFAULT_SECTIONS = ("bias", "train", "infer", "replace")


def env_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tisa-hf env",
        description="This machine (torch, device, CUDA, bf16, threads) and the attention route each TISA "
        "configuration takes on it, for training and inference at several input lengths.",
    )
    add_device_argument(parser)
    parser.add_argument("--lengths", nargs="+", type=int, default=[128, 512, 2048, 8192], help="input lengths")
    parser.add_argument("--layers", type=int, default=12, help="layers of the model (default 12: BERT base)")
    parser.add_argument("--heads", type=int, default=12, help="attention heads (default 12)")
    parser.add_argument("--head-dim", type=int, default=64, help="size of each head (default 64)")
    return parser


def bench_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tisa-hf bench", description="Speed and memory of TISA against plain attention."
    )
    add_device_argument(parser)
    parser.add_argument(
        "--sections",
        nargs="+",
        choices=BENCH_SECTIONS,
        default=list(BENCH_DEFAULT_SECTIONS),
        help=f"default: {' '.join(BENCH_DEFAULT_SECTIONS)} (long takes minutes a length: ask for it)",
    )
    parser.add_argument(
        "--implementations",
        nargs="+",
        choices=("sdpa", "eager", "fused"),
        help="default: sdpa eager, plus fused on CUDA (fused: TISA on sdpa through the fused Triton kernel's route, "
        "against stock sdpa)",
    )
    parser.add_argument(
        "--dtypes",
        nargs="+",
        choices=("float32", "bfloat16", "float16"),
        help="default: float32, plus bfloat16 on CUDA",
    )
    parser.add_argument("--bias-lengths", nargs="+", type=positive_int, default=[128, 512, 2048])
    parser.add_argument("--replace-lengths", nargs="+", type=positive_int, default=[1024, 2048, 4096])
    parser.add_argument("--long-lengths", nargs="+", type=positive_int, default=[8192, 16384, 32768])
    parser.add_argument(
        "--long-model",
        help="long: a saved TISA replace model (such as an adapted MiniLM) whose kernels TISA reads (default: the "
        "packaged MiniLM with kernels fitted at load)",
    )
    parser.add_argument("--attention-dropout", type=dropout_rate, default=0.1, help="attention dropout in training")
    parser.add_argument("--warmup", type=non_negative_int, default=1)
    parser.add_argument("--repeats", type=positive_int, default=3)
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    parser.add_argument(
        "--compile",
        action="store_true",
        help="train, infer: each model compiled with torch.compile too, timed interleaved with the eager ones (each "
        "compile's wall time reported apart; peak memory of the compiled models on CUDA only)",
    )
    parser.add_argument(
        "--compile-backend", choices=("inductor", "aot_eager"), default="inductor", help="--compile: the backend"
    )
    parser.add_argument(
        "--sdpa-backend",
        choices=("efficient", "math"),
        help="train, infer, replace: hold PyTorch's SDPA to this backend (efficient: the one a Turing GPU such as an "
        "RTX 2080 runs the bias on; CUDA only)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="instead of timing: operator calls (and on CUDA, GPU kernel launches) and section times of one step of "
        "each variant",
    )
    parser.add_argument("--layers", type=positive_int, default=12, help="--profile: the model's layers (default 12)")
    parser.add_argument("--shape", type=batch_shape, default=(2, 128), help="--profile: batch x length (default 2x128)")
    parser.add_argument("--output", default="bench.json", help="where the JSON results go")
    parser.add_argument("--memory-worker", help=argparse.SUPPRESS)
    return parser


def batch_shape(text: str) -> tuple[int, int]:
    """ "8x128": (batch, length), both positive."""
    parts = text.lower().split("x")
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(f"expected BATCHxLENGTH such as 2x128, got {text!r}")
    return positive_int(parts[0]), positive_int(parts[1])
