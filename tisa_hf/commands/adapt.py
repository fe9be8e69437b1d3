"""Entry point for `accelerate launch -m tisa_hf.commands.adapt ...`: `tisa-hf adapt`, same options and error
reporting."""

import sys

from .cli import entry

main = entry("adapt")

if __name__ == "__main__":
    sys.exit(main())
