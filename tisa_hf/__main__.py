"""`python -m tisa_hf COMMAND ...`: the `tisa-hf` command line, for environments where the console script is not
on the PATH (the same commands, options and one-line usage errors)."""

import sys

from .commands.cli import main

if __name__ == "__main__":
    sys.exit(main())
