"""The `tisa-hf` console command: `tisa_hf.cli`, with `--help` answered without importing torch.

Importing `tisa_hf` registers TISA's model types and attention functions with transformers, which imports torch
and transformers' model code: seconds before anything prints. A command's help needs only its parser, which
lives in light modules (`tisa_hf.cli.Command.options`), so for a help request this front imports `tisa_hf.cli`
under a bare `tisa_hf` package module whose `__init__` is never run: the process prints the help and exits
without a TISA model, so nothing that needs the registration can run in it. Every other invocation imports
`tisa_hf` as usual.
"""

from __future__ import annotations

import importlib.util
import sys


def _wants_help(argv: list[str]) -> bool:
    options = argv[: argv.index("--")] if "--" in argv else argv
    return not options or "-h" in options or "--help" in options


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if _wants_help(argv) and "tisa_hf" not in sys.modules:
        spec = importlib.util.find_spec("tisa_hf")
        sys.modules["tisa_hf"] = importlib.util.module_from_spec(spec)  # the package, its __init__ not executed
    from tisa_hf.cli import main as cli_main

    return cli_main(argv)


if __name__ == "__main__":
    sys.exit(main())
