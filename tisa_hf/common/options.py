"""The argparse options and types that several commands share, in one home: each command's parser (in a light
options module beside the command) takes them from here.

This module imports only the standard library, never torch, transformers' models or the data libraries:
`tisa-hf COMMAND --help` builds the command's parser and answers at once.
"""

from __future__ import annotations

import argparse


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


def positive_float(text: str) -> float:
    """An argparse type: a number above 0 (a learning rate, a temperature)."""
    value = float(text)
    if value <= 0:
        raise argparse.ArgumentTypeError(f"must be above 0, got {text}")
    return value


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


def add_device_argument(
    parser: argparse.ArgumentParser, help: str = "cpu, cuda, ... (default: cuda when available)."
) -> None:
    """--device: where the models run, checked by `common.machine.checked_device` before any model loads."""
    parser.add_argument("--device", help=help)


def add_batch_tokens_argument(parser: argparse.ArgumentParser) -> None:
    """--batch-tokens: the tokens of one forward pass (a batch holds as many sequences as fit)."""
    parser.add_argument("--batch-tokens", type=positive_int, default=8192, help="Tokens per forward pass.")


def add_out_argument(parser: argparse.ArgumentParser, help: str) -> None:
    """--out, the folder a command writes its results to; `help` names what it holds."""
    parser.add_argument("--out", required=True, help=help)


def add_work_argument(parser: argparse.ArgumentParser, holds: str) -> None:
    """--work, the folder of what a rerun rebuilds (`holds`), kept apart from --out's results where asked."""
    parser.add_argument(
        "--work",
        metavar="DIR",
        help=f"Folder for {holds}, which an interrupted run resumes from and a later call's hybrids fuse, and which a "
        "rerun rebuilds (default: --out; one under runs/ keeps a folder of committed results light).",
    )


def add_overwrite_argument(
    parser: argparse.ArgumentParser, help: str = "Start over instead of resuming an existing run."
) -> None:
    """--overwrite: replace what a finished (or resumable) earlier run in --out holds instead of refusing or
    resuming."""
    parser.add_argument("--overwrite", action="store_true", help=help)


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
