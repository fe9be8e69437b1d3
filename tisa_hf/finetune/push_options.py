"""The options of `tisa-hf push`; light (argparse only), so that `--help` answers without importing torch."""

from __future__ import annotations

import argparse


def push_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tisa-hf push", description="Upload a run's model with a model card.")
    parser.add_argument("run_dir", help="Run directory: saved model, tokenizer and metrics.json.")
    parser.add_argument("repo_id", help="Hub repository, e.g. user/bert-base-tisa-rte.")
    parser.add_argument("--private", action="store_true", help="Create the repository as private.")
    return parser
