"""How the evaluation commands (`lm-eval`, `longembed`, `qmsum`, `sts`) spell a model, parsed here for all of them.

`MODEL` (a folder, Hub id or `minilm`) reads the whole input; a prefix says how it reads inputs longer than its
position table, or which TISA it is given:
- `trunc:MODEL`: the first T tokens (T: the position table; the final [SEP] kept), as sentence-transformers
  truncates.
- `chunk:MODEL`: chunk-and-average (`pooling.py`).
- `interp:MODEL`: linear position interpolation of the table to the input's length (`interpolation.py`).
- `tisa:MODE:S:MODEL`: MODEL given TISA with S kernels in MODE, fitted to its positional profiles and not adapted
  (`tisa:replace:5:minilm`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import TisaConfig
from ..errors import UsageError

TRUNCATION_PREFIX = "trunc:"
CHUNKING_PREFIX = "chunk:"
INTERPOLATION_PREFIX = "interp:"
TISA_PREFIX = "tisa:"
# The prefixes that choose how a model reads an input past its table, and the reading's name
READINGS = {TRUNCATION_PREFIX: "trunc", CHUNKING_PREFIX: "chunk", INTERPOLATION_PREFIX: "interp"}


@dataclass(frozen=True)
class Spelling:
    """A model as spelled: how it reads (`full`, `trunc`, `chunk`, `interp`), the model, and the TISA it is given
    here (`tisa:` spellings; None: its own)."""

    reading: str
    model: str
    tisa: TisaConfig | None = None


def parse_spelling(spec: str) -> Spelling:
    reading, model, tisa = "full", spec, None
    for prefix, name in READINGS.items():
        if spec.startswith(prefix):
            reading, model = name, spec.removeprefix(prefix)
    if spec.startswith(TISA_PREFIX):
        mode, kernels, model = (spec.removeprefix(TISA_PREFIX).split(":", 2) + ["", ""])[:3]
        if mode not in ("add", "replace") or not kernels.isdigit() or not model:
            raise UsageError(f"{spec}: write tisa:MODE:S:MODEL, MODE add or replace and S a whole number.")
        tisa = TisaConfig(num_kernels=int(kernels), mode=mode)
    return Spelling(reading, model, tisa)
