"""Entry point for `accelerate launch -m tisa_hf.commands.glue ...`: `tisa-hf glue`, same options and error
reporting."""

import sys

from .cli import entry

main = entry("glue")

if __name__ == "__main__":
    sys.exit(main())
