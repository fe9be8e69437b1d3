"""The options of the argparse-based commands (the fine-tuning and adapt commands take theirs from the dataclasses
of `finetune/arguments.py` and `adapt/arguments.py`).

This module imports only the standard library and light tisa_hf modules, never torch, transformers' models or
the data libraries: `tisa-hf COMMAND --help` builds the command's parser from here and answers at once.
"""

from __future__ import annotations

import argparse

from .packaged import MINILM_ALIAS

BENCH_SECTIONS = ("bias", "train", "infer", "replace", "long")
BENCH_DEFAULT_SECTIONS = ("bias", "train", "infer", "replace")


def demo_parser(description: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tisa-hf demo",
        description=description or "Offline quickstart on the packaged MiniLM: patch, fit, plot, save, reload.",
    )
    parser.add_argument("--model", default=MINILM_ALIAS, help="Hub id or path (default: the packaged MiniLM)")
    parser.add_argument("--out", default="tisa-demo", help="output folder")
    parser.add_argument("--kernels", type=non_negative_int, default=5, help="S, kernels per head and layer")
    parser.add_argument("--mode", default="add", choices=["add", "replace"])
    parser.add_argument("--overwrite", action="store_true", help="start over in an --out that holds a finished demo")
    return parser


def _add_analysis_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--max-len", type=int, default=512, help="positions to analyse (default 512)")
    parser.add_argument("--tokenizer", help="tokenizer path or Hub id (default: the model's)")
    parser.add_argument("--text-file", help="texts for the trace vectors, one per line (default: built-in)")
    parser.add_argument("--word", default="the", help="the repeated word of identical-word probing")
    parser.add_argument("--include-special", action="store_true", help="keep [CLS]/[SEP] in the probing indicators")
    parser.add_argument("--seed", type=int, default=0, help="seed of the random inputs of analysis 6")
    parser.add_argument(
        "--no-progress", action="store_true", help="hide the progress bar (shown only on a terminal anyway)"
    )


def analyze_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tisa-hf analyze", description="Positional analysis report (HTML, JSON, PNG) of one encoder."
    )
    parser.add_argument("model", help="local folder or Hub id of a supported encoder (TISA or not), or minilm")
    parser.add_argument("--out", required=True, help="report folder (report.html, metrics.json, figures)")
    parser.add_argument("--layers", type=int, nargs="+", help="layers to show, counted from 0 (default: all)")
    _add_analysis_options(parser)
    return parser


def compare_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tisa-hf compare",
        description="Key positional numbers of several encoders in one table, optionally against a score.",
    )
    parser.add_argument(
        "models",
        nargs="+",
        help="model folders (fine-tuning runs included) or Hub ids, or report folders of `tisa-hf analyze`",
    )
    parser.add_argument("--scores", type=float, nargs="+", help="one score per model (e.g. GLUE dev accuracy)")
    parser.add_argument("--score-name", default="score", help="what the scores measure, for the plot")
    parser.add_argument("--out", help="folder for compare.json, compare.csv and compare_scatter.png")
    _add_analysis_options(parser)
    return parser


def sweep_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tisa-hf sweep", description="Every (task, variant, seed) run of a grid, one process launch each."
    )
    parser.add_argument("--config", required=True, help="Sweep YAML file.")
    parser.add_argument("--dry-run", action="store_true", help="Print the runs and their status, run nothing.")
    parser.add_argument(
        "--tasks", nargs="+", help="Only these of the file's tasks (to split one grid across processes or GPUs)."
    )
    parser.add_argument("--seeds", nargs="+", type=int, help="Only these of the file's seeds.")
    parser.add_argument("--folds", nargs="+", type=int, help="Only these of the file's cross-validation folds.")
    parser.add_argument("--variants", nargs="+", help="Only these of the file's variants.")
    return parser


def _whole_number(text: str, minimum: int) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None
    if value < minimum:
        raise argparse.ArgumentTypeError(f"must be at least {minimum}, got {value}")
    return value


def positive_int(text: str) -> int:
    """An argparse type: a whole number of at least 1 (a count of tokens or resamples)."""
    return _whole_number(text, 1)


def non_negative_int(text: str) -> int:
    """An argparse type: a whole number of at least 0 (a count that may be none, such as warm-up runs)."""
    return _whole_number(text, 0)


def dropout_rate(text: str) -> float:
    """An argparse type: a probability in [0, 1)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not 0 <= value < 1:
        raise argparse.ArgumentTypeError(f"must be in [0, 1), got {value}")
    return value


def batch_shape(text: str) -> tuple[int, int]:
    """ "8x128": (batch, length), both positive."""
    parts = text.lower().split("x")
    if len(parts) != 2:
        raise argparse.ArgumentTypeError(f"expected BATCHxLENGTH such as 2x128, got {text!r}")
    return positive_int(parts[0]), positive_int(parts[1])


def add_paired_arguments(parser: argparse.ArgumentParser, difference: str, over: str) -> None:
    """--paired REF... (every other compared item's `difference` to REF, with a 95% bootstrap interval `over` what
    is resampled) and the bootstrap's resamples and seed."""
    parser.add_argument(
        "--paired",
        nargs="+",
        default=[],
        metavar="REF",
        help=f"Every other {difference} (REF one of those compared), with a 95%% bootstrap interval over {over}.",
    )
    add_bootstrap_arguments(parser)


def add_bootstrap_arguments(parser: argparse.ArgumentParser) -> None:
    """The resamples and seed of a command's --paired intervals."""
    parser.add_argument("--bootstrap", type=positive_int, default=1000, help="Bootstrap resamples for --paired.")
    parser.add_argument("--bootstrap-seed", type=int, default=0, help="Seed of the bootstrap draws.")


def report_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tisa-hf report", description="Results tables of fine-tuning runs (the TISA paper's table 3 layout)."
    )
    parser.add_argument(
        "runs_dir",
        nargs="+",
        help="Folders searched (recursively) for metrics.json files: a sweep's output_dir, or some of its variants' "
        "folders (the chosen rates of a learning-rate grid).",
    )
    parser.add_argument("--out", help="Write the Markdown table here (it is printed either way).")
    parser.add_argument("--metric", action="append", default=[], help="TASK=METRIC, e.g. mrpc=f1 (repeatable).")
    parser.add_argument("--spread", action="store_true", help="Show each cell's [min, max] over seeds too.")
    parser.add_argument(
        "--mode", choices=("add", "replace"), help="Only the baselines and the TISA runs of this mode (table 3a / 3b)."
    )
    parser.add_argument(
        "--seeds", nargs="+", type=int, help="Only runs of these seeds: the balanced part of a grid still running."
    )
    parser.add_argument(
        "--paired",
        metavar="VARIANT",
        help="Also the paired difference of every other variant to VARIANT (a row name, e.g. baseline), with a 95%% "
        "bootstrap interval over dev examples and seeds; needs the runs' predictions.json.",
    )
    add_bootstrap_arguments(parser)
    parser.add_argument("--json", help="Write every run's record (and the paired differences) here as JSON.")
    return parser


def lm_eval_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tisa-hf lm-eval", description="Teacher agreement and masked-token loss against input length."
    )
    parser.add_argument("models", nargs="+", help="Checkpoints (folder, Hub id, minilm) or interp:NAME.")
    parser.add_argument("--text", required=True, help="Held-out plain text (e.g. WikiText's test.txt).")
    parser.add_argument("--lengths", type=int, nargs="+", required=True, help="Input lengths in tokens.")
    parser.add_argument("--out", required=True, help="Folder for lm_eval.json, lm_eval.md and lm_eval.png.")
    parser.add_argument("--teacher", help="The original model, for agreement at the lengths it reads.")
    parser.add_argument("--mlm-head", help="A *ForMaskedLM checkpoint whose head every model uses.")
    parser.add_argument("--tokenizer", help="Tokenizer (default: the teacher's, else the first model's).")
    parser.add_argument(
        "--max-tokens",
        type=positive_int,
        default=65536,
        help="Tokens per length: max-tokens // length blocks (at least one), spread over the text.",
    )
    parser.add_argument("--batch-tokens", type=positive_int, default=8192, help="Tokens per forward pass.")
    parser.add_argument("--mlm-probability", type=float, default=0.15, help="Share of tokens masked.")
    parser.add_argument("--seed", type=int, default=0, help="Masking seed, the same for every model.")
    parser.add_argument("--device", help="cpu, cuda, ... (default: cuda when available).")
    add_paired_arguments(parser, "model's difference to REF", "blocks")
    parser.add_argument(
        "--overwrite",
        action="store_true",
        help="Replace an existing lm_eval.json, or discard an unfinished evaluation's results (a rerun with the "
        "same settings resumes from them).",
    )
    return parser


def push_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tisa-hf push", description="Upload a run's model with a model card.")
    parser.add_argument("run_dir", help="Run directory: saved model, tokenizer and metrics.json.")
    parser.add_argument("repo_id", help="Hub repository, e.g. user/bert-base-tisa-rte.")
    parser.add_argument("--private", action="store_true", help="Create the repository as private.")
    return parser


def env_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tisa-hf env",
        description="This machine (torch, device, CUDA, bf16, threads) and the attention route each TISA "
        "configuration takes on it, for training and inference at several input lengths.",
    )
    parser.add_argument("--device", help="cpu, cuda, ... (default: cuda when available)")
    parser.add_argument("--lengths", nargs="+", type=int, default=[128, 512, 2048, 8192], help="input lengths")
    parser.add_argument("--layers", type=int, default=12, help="layers of the model (default 12: BERT base)")
    parser.add_argument("--heads", type=int, default=12, help="attention heads (default 12)")
    parser.add_argument("--head-dim", type=int, default=64, help="size of each head (default 64)")
    return parser


def bench_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tisa-hf bench", description="Speed and memory of TISA against plain attention."
    )
    parser.add_argument("--device", help="cpu, cuda, ... (default: cuda when available)")
    parser.add_argument(
        "--sections",
        nargs="+",
        choices=BENCH_SECTIONS,
        default=list(BENCH_DEFAULT_SECTIONS),
        help=f"default: {' '.join(BENCH_DEFAULT_SECTIONS)} (long takes minutes a length: ask for it)",
    )
    parser.add_argument("--implementations", nargs="+", choices=("sdpa", "eager"), default=["sdpa", "eager"])
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
        help="instead of timing: operator calls (and on CUDA kernels) and section times of one step of each variant",
    )
    parser.add_argument("--layers", type=positive_int, default=12, help="--profile: the model's layers (default 12)")
    parser.add_argument("--shape", type=batch_shape, default=(2, 128), help="--profile: batch x length (default 2x128)")
    parser.add_argument("--output", default="bench.json", help="where the JSON results go")
    parser.add_argument("--memory-worker", help=argparse.SUPPRESS)
    return parser
