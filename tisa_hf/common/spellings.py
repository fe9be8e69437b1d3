"""How the evaluation commands (`lm-eval`, `longembed`, `qmsum`, `sts`) spell a model, parsed here for all of them.

`MODEL` (a folder, Hub id or `minilm`) reads the whole input; a prefix says how it reads inputs longer than its
position table, or which TISA it is given:
- `trunc:MODEL`: the first T tokens (T: the position table; the final [SEP] kept), as sentence-transformers
  truncates.
- `chunk:MODEL`: chunk-and-average (`pooling.py`).
- `interp:MODEL`: linear position interpolation of the table to the input's length (`interpolation.py`).
- `tisa:MODE:S:MODEL`: MODEL given TISA with S kernels in MODE, fitted to its positional profiles and not adapted
  (`tisa:replace:5:minilm`).

`max:` before any of these (but `trunc:`, which reads one window) keeps a document as several vectors, one per
window of T - 2 tokens, and scores it by its best window (the retrieval commands' multi-vector read-out): the
chunks' own embeddings for `max:chunk:MODEL`, the mean of the whole document's token states over each window for a
whole read (`max:MODEL`, `max:interp:MODEL`), so that the two differ only in whether a window was read in context.

`late:` before any of these keeps a document as its token vectors and scores it by late interaction (ColBERT's
MaxSim): each token's state as the reading gives it (the whole document's for a whole read, each chunk's for
`chunk:`, the first T tokens' for `trunc:`), the query's likewise, and the mean over the query's tokens of each one's
best cosine similarity to a document token.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config import TisaConfig
from ..errors import UsageError

TRUNCATION_PREFIX = "trunc:"
CHUNKING_PREFIX = "chunk:"
INTERPOLATION_PREFIX = "interp:"
TISA_PREFIX = "tisa:"
MAX_PREFIX = "max:"
LATE_PREFIX = "late:"
READOUTS = {MAX_PREFIX: "max", LATE_PREFIX: "late"}
# The prefixes that choose how a model reads an input past its table, and the reading's name
READINGS = {TRUNCATION_PREFIX: "trunc", CHUNKING_PREFIX: "chunk", INTERPOLATION_PREFIX: "interp"}


@dataclass(frozen=True)
class Spelling:
    """A model as spelled: how it reads (`full`, `trunc`, `chunk`, `interp`), the model, the TISA it is given
    here (`tisa:` spellings; None: its own), and its read-out (`mean`: one vector a document; `max`: `max:`;
    `late`: `late:`)."""

    reading: str
    model: str
    tisa: TisaConfig | None = None
    readout: str = "mean"


def parse_spelling(spec: str) -> Spelling:
    readout, rest = "mean", spec
    for prefix, name in READOUTS.items():
        if spec.startswith(prefix):
            readout, rest = name, spec.removeprefix(prefix)
    reading, model, tisa = "full", rest, None
    for prefix, name in READINGS.items():
        if rest.startswith(prefix):
            reading, model = name, rest.removeprefix(prefix)
    if readout == "max" and reading == "trunc":
        raise UsageError(f"{spec}: a truncated document is one window; max: reads MODEL, chunk:MODEL or interp:MODEL.")
    if rest.startswith(TISA_PREFIX):
        mode, kernels, model = (rest.removeprefix(TISA_PREFIX).split(":", 2) + ["", ""])[:3]
        if mode not in ("add", "replace") or not kernels.isdigit() or not model:
            raise UsageError(f"{spec}: write tisa:MODE:S:MODEL, MODE add or replace and S a whole number.")
        tisa = TisaConfig(num_kernels=int(kernels), mode=mode)
    return Spelling(reading, model, tisa, readout)
