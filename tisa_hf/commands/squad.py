"""Entry point for `accelerate launch -m tisa_hf.commands.squad ...`: `tisa-hf squad`, same options and error
reporting."""

import sys

from .cli import entry

main = entry("squad")

if __name__ == "__main__":
    sys.exit(main())
