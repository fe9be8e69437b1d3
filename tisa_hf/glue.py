"""Entry point for `accelerate launch -m tisa_hf.glue ...` (same options as `tisa-hf glue`)."""

import sys

from .finetune.glue import main

if __name__ == "__main__":
    sys.exit(main())
