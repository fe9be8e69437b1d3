"""`accelerate launch -m tisa_hf.squad`, the entry the previous release documented: says in one line that it is
now `tisa_hf.commands.squad`, then runs it. It goes in the next minor version, 0.3."""

import sys

from .commands.cli import moved_entry

main = moved_entry("tisa_hf.squad", "squad")

if __name__ == "__main__":
    sys.exit(main())
