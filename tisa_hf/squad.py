"""Entry point for `accelerate launch -m tisa_hf.squad ...` (same options as `tisa-hf squad`)."""

import sys

from .finetune.squad import main

if __name__ == "__main__":
    sys.exit(main())
