"""Entry point for `accelerate launch -m tisa_hf.commands.classify ...`: `tisa-hf classify`, same options and error
reporting."""

import sys

from .cli import entry

main = entry("classify")

if __name__ == "__main__":
    sys.exit(main())
