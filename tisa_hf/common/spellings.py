"""How the evaluation commands (`lm-eval`, `longembed`, `qmsum`, `spans`, `sts`) spell a model system: one grammar,
its parts registered here.

A model system is `[READOUT][READING]MODEL` or `[READOUT]tisa:MODE:S:MODEL`, its parts in that order:
- a read-out (`READOUTS`): what a document becomes to be compared with a query (one vector, one a window, one a
  token); the retrieval commands score each as its scorer says (`embeddings/retrieval/readouts.py`);
- a reading (`READINGS`): how the model reads an input longer than its position table (T tokens), which it cuts
  into the pieces it reads (`Reading.pieces`);
- `tisa:MODE:S:`: MODEL given TISA with S kernels in MODE, fitted to its positional profiles and not adapted
  (`tisa:replace:5:minilm`); it reads whole, as its mode allows.
- MODEL: a folder, Hub id or `minilm`.

Each part owns its prefix, its help line and the parts it combines with: the commands' `--help`, the table of
docs/long-documents.md (held to this registry by tests/test_spellings.py) and the refusals are written from them,
and a `Spelling` prints back as it was spelled.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from ..config import TisaConfig
from ..errors import UsageError

TISA_PREFIX = "tisa:"
TISA_HELP = "MODEL given TISA with S kernels in MODE, add or replace, fitted to its positional profiles and not adapted"


def whole(sequence: list[int], table: int) -> list[list[int]]:
    return [sequence]


def first_tokens(sequence: list[int], table: int) -> list[list[int]]:
    """The first `table` tokens, the final [SEP] kept."""
    return [sequence[: table - 1] + sequence[-1:]] if len(sequence) > table else [sequence]


def table_chunks(sequence: list[int], table: int) -> list[list[int]]:
    """`[CLS] chunk [SEP]` pieces of at most `table` tokens (`common/long_inputs.py`)."""
    from .long_inputs import chunks_of

    return chunks_of(sequence, table) if len(sequence) > table else [sequence]


@dataclass(frozen=True)
class Reading:
    """How a model reads an input: `name` (as records name it), `prefix`, `help`, the pieces it cuts an input into
    (`pieces`, given the position table's length), whether it reads any length, whether it reads the whole input in
    one forward pass (`one_pass`), and whether it stretches the position table to the input (`stretches`)."""

    name: str
    prefix: str
    help: str
    pieces: Callable[[list[int], int], list[list[int]]]
    reads_any_length: bool
    one_pass: bool
    stretches: bool = False


WHOLE = Reading(
    "full", "", "the whole input; a plain or TISA add model reads at most its table", whole,
    reads_any_length=False, one_pass=True,
)  # fmt: skip
TRUNC = Reading(
    "trunc", "trunc:", "its table's first tokens, as sentence-transformers truncates", first_tokens,
    reads_any_length=True, one_pass=False,
)  # fmt: skip
CHUNK = Reading(
    "chunk", "chunk:", "chunks of its table's length read apart: chunk-and-average", table_chunks,
    reads_any_length=True, one_pass=False,
)  # fmt: skip
INTERP = Reading(
    "interp", "interp:", "position interpolation of its table to the input's length", whole,
    reads_any_length=True, one_pass=True, stretches=True,
)  # fmt: skip
READINGS = (WHOLE, TRUNC, CHUNK, INTERP)


@dataclass(frozen=True)
class Readout:
    """What a document becomes to be compared with a query: `name` (as records name it), `prefix`, `help`, the
    readings it combines with, and why it takes no other (`refusal`)."""

    name: str
    prefix: str
    help: str
    readings: tuple[Reading, ...] = READINGS
    refusal: str = ""


MEAN = Readout("mean", "", "one vector a text, documents ranked by cosine")
MAX = Readout(
    "max",
    "max:",
    "a document kept as one vector per window of T - 2 tokens, scored by its best window: the chunks' own for "
    "chunk:, else the whole document's token states averaged over each window",
    (WHOLE, CHUNK, INTERP),
    "a truncated document is one window",
)
LATE = Readout(
    "late",
    "late:",
    "one vector a token as the reading gives them, scored by MaxSim, ColBERT's late interaction",
)
READOUTS = (MEAN, MAX, LATE)


def alternatives(parts: tuple[Reading, ...] | tuple[Readout, ...]) -> str:
    return "[" + "|".join(part.prefix for part in parts if part.prefix) + "]"


GRAMMAR = f"{alternatives(READOUTS)}{alternatives(READINGS)}MODEL or {alternatives(READOUTS)}{TISA_PREFIX}MODE:S:MODEL"
PREFIXES = tuple(part.prefix for part in (*READOUTS, *READINGS) if part.prefix) + (TISA_PREFIX,)


def spoken_list(items: list[str], conjunction: str = "or") -> str:
    """`a`, `a or b`, `a, b or c` (or with another conjunction)."""
    return f" {conjunction} ".join(filter(None, [", ".join(items[:-1]), items[-1]]))


@dataclass(frozen=True)
class Spelling:
    """A model system as spelled: the model, how it reads, its read-out, and the TISA it is given here (`tisa:`;
    None: its own). `str` prints it back as spelled."""

    model: str
    reading: Reading = WHOLE
    readout: Readout = MEAN
    tisa: TisaConfig | None = None

    def __str__(self) -> str:
        tisa = f"{TISA_PREFIX}{self.tisa.mode}:{self.tisa.num_kernels}:" if self.tisa else ""
        return f"{self.readout.prefix}{self.reading.prefix}{tisa}{self.model}"

    def read_as(self, reading: Reading) -> Spelling:
        """The same model and read-out read another way (its own TISA: a reading past the table takes no `tisa:`)."""
        return replace(self, reading=reading, tisa=None)

    def longer_readings(self) -> list[str]:
        """The spellings that read this model past its table with the same read-out."""
        return [str(self.read_as(reading)) for reading in self.readout.readings if reading.reads_any_length]


def parse_spelling(spec: str) -> Spelling:
    """The spelling's parts, each prefix in its place; a prefix out of place, a read-out with a reading it does not
    take, or a malformed `tisa:` is refused in one line."""
    readout = next((part for part in READOUTS if part.prefix and spec.startswith(part.prefix)), MEAN)
    rest = spec.removeprefix(readout.prefix)
    reading = next((part for part in READINGS if part.prefix and rest.startswith(part.prefix)), WHOLE)
    model, tisa = rest.removeprefix(reading.prefix), None
    if reading is WHOLE and model.startswith(TISA_PREFIX):
        mode, kernels, model = (model.removeprefix(TISA_PREFIX).split(":", 2) + ["", ""])[:3]
        if mode not in ("add", "replace") or not kernels.isdigit() or kernels != str(int(kernels)) or not model:
            raise UsageError(f"{spec}: write tisa:MODE:S:MODEL, MODE add or replace and S a whole number.")
        tisa = TisaConfig(num_kernels=int(kernels), mode=mode)
    misplaced = next((prefix for prefix in PREFIXES if model.startswith(prefix)), None)
    if misplaced is not None:
        raise UsageError(f"{spec}: {misplaced} is out of place; a system is spelled {GRAMMAR}, in that order.")
    if reading not in readout.readings:
        taken = spoken_list([f"{part.prefix}MODEL" for part in readout.readings])
        raise UsageError(f"{spec}: {readout.refusal}; {readout.prefix} reads {taken}.")
    return Spelling(model, reading, readout, tisa)


def model_spellings(
    readouts: tuple[Readout, ...] = READOUTS, readings: tuple[Reading, ...] = READINGS
) -> dict[str, str]:
    """Each reading's (of `readings`), `tisa:`'s and each prefixed read-out's (of `readouts`) spelling and help
    line."""
    return {
        **{f"{reading.prefix}MODEL": reading.help for reading in readings},
        f"{TISA_PREFIX}MODE:S:MODEL": TISA_HELP,
        **{f"{readout.prefix}SYSTEM": readout.help for readout in readouts if readout.prefix},
    }
