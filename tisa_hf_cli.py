"""The `tisa-hf` console command: `tisa_hf.commands.cli`, with help and mistyped options answered without importing
torch.

Importing `tisa_hf` registers TISA's model types and attention functions with transformers, which imports torch
and transformers' model code: seconds before anything prints. A command's help and the checks of its options
need only its parser, which lives in light modules (`tisa_hf.commands.registry.Command.options`), so this front imports
`tisa_hf.commands.cli` under a bare `tisa_hf` package module whose `__init__` has not run: the command list, a help
request and a command line the options refuse are answered from there, and the process exits without a TISA
model. A command whose options parse has the package's `__init__` run in that same module first, so it runs
with tisa_hf imported (and registered) as usual.
"""

from __future__ import annotations

import importlib.util
import sys


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if "tisa_hf" in sys.modules:  # imported in full already (a caller in Python)
        from tisa_hf.commands.cli import main as cli_main

        return cli_main(argv)
    spec = importlib.util.find_spec("tisa_hf")
    package = sys.modules["tisa_hf"] = importlib.util.module_from_spec(spec)  # its __init__ not run yet
    from tisa_hf.commands.cli import main as cli_main

    return cli_main(argv, before_running=lambda: spec.loader.exec_module(package))


if __name__ == "__main__":
    sys.exit(main())
