"""Entry point for `accelerate launch -m tisa_hf.adapt ...` (same options as `tisa-hf adapt`)."""

import sys

from .run import main

if __name__ == "__main__":
    sys.exit(main())
