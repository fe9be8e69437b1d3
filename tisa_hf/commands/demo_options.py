"""The options of `tisa-hf demo`; light (argparse only), so that `--help` answers without importing torch."""

from __future__ import annotations

import argparse

from ..common.options import add_overwrite_argument, non_negative_int
from ..packaged import MINILM_ALIAS


def demo_parser(description: str | None = None) -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="tisa-hf demo",
        description=description or "Offline quickstart on the packaged MiniLM: patch, fit, plot, save, reload.",
    )
    parser.add_argument("--model", default=MINILM_ALIAS, help="Hub id or path (default: the packaged MiniLM)")
    parser.add_argument("--out", default="tisa-demo", help="output folder")
    parser.add_argument("--kernels", type=non_negative_int, default=5, help="S, kernels per head and layer")
    parser.add_argument("--mode", default="add", choices=["add", "replace"])
    add_overwrite_argument(parser, "start over in an --out that holds a finished demo")
    return parser
