"""`tisa-hf ARGV` as a Ray driver for tests/test_ray_engine.py: the Ray engine's actors are `RecordingEmbedder`s,
and with the hooks folder's `interrupt` file the run stops (KeyboardInterrupt) once its first part is counted."""

import os
import sys
from pathlib import Path

from ray_fixtures import HOOKS_VARIABLE, INTERRUPT, RecordingEmbedder

from tisa_hf.commands import cli
from tisa_hf.embeddings import encode, ray_parts

ray_parts.PartEmbedder = RecordingEmbedder
if (Path(os.environ[HOOKS_VARIABLE]) / INTERRUPT).exists():
    add_part = encode.PartState.add_part

    def add_part_then_stop(self, *args):
        add_part(self, *args)
        raise KeyboardInterrupt

    encode.PartState.add_part = add_part_then_stop
sys.exit(cli.main(sys.argv[1:]))
