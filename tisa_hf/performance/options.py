"""The options of `tisa-hf bench` and `tisa-hf env`; light (argparse only), so that `--help` answers without
importing torch."""

from __future__ import annotations

import argparse

from ..common.options import add_device_argument, dropout_rate, non_negative_int, positive_int

# `--architectures`: the encoders the model sections time against their stock classes, BERT and the RoPE encoders.
BENCH_ARCHITECTURES = ("bert", "modernbert", "nomic_bert", "gte", "eurobert")
BENCH_SECTIONS = ("bias", "train", "infer", "replace", "replace-train", "long")
BENCH_DEFAULT_SECTIONS = ("bias", "train", "infer", "replace")
# The shapes `train` and `infer` time: small ones, and fine-tuning's own (GLUE at 32 x 128, SQuAD at 24 x 384, full
# 512-token inputs at 8 x 512), which a CPU needs minutes a step for, so it times them only when asked.
SMALL_SHAPES = ((8, 128), (2, 512))
FINE_TUNING_SHAPES = ((32, 128), (24, 384), (8, 512))
PROFILE_SHAPE = (2, 128)
# `replace` and `replace-train`: input lengths past the 512-position table (8,192 only on CUDA: on a CPU one
# BERT-base step at that length takes minutes).
REPLACE_LENGTHS = (1024, 2048, 4096)
CUDA_REPLACE_LENGTHS = (*REPLACE_LENGTHS, 8192)


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
        help=f"default: {' '.join(BENCH_DEFAULT_SECTIONS)} (replace only where sdpa or fused is timed; "
        "replace-train: TISA replace training steps against the enlarged table; long takes minutes a length: ask for "
        "them)",
    )
    parser.add_argument(
        "--architectures",
        nargs="+",
        choices=BENCH_ARCHITECTURES,
        default=[BENCH_ARCHITECTURES[0]],
        help="train, infer, replace, replace-train: the encoders timed, each with TISA against its stock class at "
        "BERT base's size (12 layers, 768 wide, 12 heads; the RoPE encoders with their own settings otherwise and "
        "BERT's vocabulary) (default: bert)",
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
    parser.add_argument(
        "--shapes",
        nargs="+",
        type=batch_shape,
        metavar="BxN",
        help="train, infer: BATCHxLENGTH shapes (default: "
        + " ".join(f"{b}x{n}" for b, n in SMALL_SHAPES)
        + ", plus fine-tuning's "
        + " ".join(f"{b}x{n}" for b, n in FINE_TUNING_SHAPES)
        + f" on CUDA; --profile: {PROFILE_SHAPE[0]}x{PROFILE_SHAPE[1]})",
    )
    parser.add_argument("--bias-lengths", nargs="+", type=positive_int, default=[128, 512, 2048])
    parser.add_argument(
        "--replace-lengths",
        nargs="+",
        type=positive_int,
        help=f"replace, replace-train: input lengths (default: {' '.join(map(str, REPLACE_LENGTHS))}, plus 8192 on "
        "CUDA)",
    )
    parser.add_argument("--long-lengths", nargs="+", type=positive_int, default=[8192, 16384, 32768])
    parser.add_argument(
        "--long-model",
        help="long: a saved TISA replace model (such as an adapted MiniLM) whose kernels TISA reads (default: the "
        "packaged MiniLM with kernels fitted at load)",
    )
    parser.add_argument(
        "--attention-dropout",
        nargs="+",
        type=dropout_rate,
        default=[0.1],
        help="train, replace-train: attention dropout rates, each timed (default 0.1, BERT's)",
    )
    parser.add_argument("--warmup", type=non_negative_int, default=1)
    parser.add_argument("--repeats", type=positive_int, default=3)
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory subprocesses")
    parser.add_argument(
        "--compile",
        action="store_true",
        help="the model sections: each model compiled with torch.compile too, timed interleaved with the eager "
        "ones (each compile's wall time reported apart; peak memory of the compiled models on CUDA only)",
    )
    parser.add_argument(
        "--compile-backend", choices=("inductor", "aot_eager"), default="inductor", help="--compile: the backend"
    )
    parser.add_argument(
        "--sdpa-backend",
        choices=("efficient", "math"),
        help="the model sections: hold PyTorch's SDPA to this backend (efficient: the one a Turing GPU such as an "
        "RTX 2080 runs the bias on; CUDA only)",
    )
    parser.add_argument(
        "--profile",
        action="store_true",
        help="instead of timing: operator calls (and on CUDA, GPU kernel launches) and section times of one step of "
        "each variant",
    )
    parser.add_argument(
        "--layers",
        type=positive_int,
        default=12,
        help="the models' layers (default 12: BERT base; fewer for a quick look at the shapes)",
    )
    parser.add_argument("--output", default="bench.json", help="where the JSON results go")
    parser.add_argument("--memory-worker", help=argparse.SUPPRESS)
    return parser


def batch_shape(text: str) -> tuple[int, int]:
    """ "8x128": (batch, length), both positive."""
    parts = text.lower().split("x")
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(f"expected BATCHxLENGTH such as 2x128, got {text!r}")
    return positive_int(parts[0]), positive_int(parts[1])
