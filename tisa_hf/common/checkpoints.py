"""What a checkpoint can do and how many tokens it reads, from its config alone, so that bad requests fail before
any weights load; every command asks here.

TISA `mode="replace"` reads any length, so no limit; a plain model and TISA `mode="add"` keep their position table,
and an input longer than it would fail in the first forward (or, for some architectures, index out of range), or
their rotary embeddings, which run past the range they were trained on but are read only inside it.
"""

from __future__ import annotations

from dataclasses import dataclass

from transformers import AutoConfig, PreTrainedConfig

from ..adapters import PositionScheme
from ..attaching import config_position_scheme, config_table_length
from ..config import TisaConfig
from ..errors import UsageError
from .hub_access import model_source

# Architectures whose checkpoints hold an MLM head that AutoModelForMaskedLM loads.
MLM_HEAD_SUFFIXES = ("ForMaskedLM", "ForPreTraining")


@dataclass(frozen=True)
class CheckpointFacts:
    """`name` as given, its resolved `path`, its TISA settings (None: unpatched), whether it has an MLM head, how
    many positions its encoder was built for (`table_length`) and how it knows them (`positions`), its vocabulary
    size and whether it loads from the local cache only."""

    name: str
    path: str
    config: PreTrainedConfig
    tisa: TisaConfig | None
    has_mlm_head: bool
    table_length: int  # positions the encoder was built for: its table's rows or its rotary range
    positions: PositionScheme
    architectures: tuple[str, ...]
    vocab_size: int
    local_files_only: bool = False  # the Hub is out of reach, but its cache holds the model

    @classmethod
    def read(cls, name: str, option: str = "--model", needs_tokenizer: bool = False) -> CheckpointFacts:
        """The facts of `name` (given as `option`, for the messages), which `model_source` checks first (with its
        tokenizer when `needs_tokenizer`)."""
        source = model_source(name, option, needs_tokenizer=needs_tokenizer)
        path = source.path
        try:
            config = AutoConfig.from_pretrained(path, local_files_only=source.local_files_only)
        except (OSError, ValueError) as error:
            raise UsageError(f"Could not read a model config from {name!r}: {error}".splitlines()[0]) from error
        architectures = tuple(config.architectures or ())
        tisa = getattr(config, "tisa", None)
        return cls(
            name=name,
            path=path,
            config=config,
            tisa=TisaConfig.from_value(tisa) if tisa else None,
            has_mlm_head=any(name.endswith(MLM_HEAD_SUFFIXES) for name in architectures),
            table_length=config_table_length(config),
            positions=config_position_scheme(config),
            architectures=architectures,
            vocab_size=config.vocab_size,
            local_files_only=source.local_files_only,
        )

    @property
    def any_length(self) -> bool:
        return reads_any_length(self.tisa)

    def reads(self, length: int) -> bool:
        return self.any_length or length <= self.table_length


def reads_any_length(tisa: TisaConfig | None) -> bool:
    """Whether a model with TISA `tisa` (None: plain) reads inputs of any length: TISA `replace` mode has no
    position table."""
    return tisa is not None and tisa.mode == "replace"


def position_limit(config: PreTrainedConfig, tisa: TisaConfig | None) -> int | None:
    """Tokens an input may have: the rows of the position table real tokens use (`config_table_length`); None
    when the model reads any length (TISA `replace` mode) or its architecture is one TISA does not support."""
    if reads_any_length(tisa):
        return None
    try:
        return config_table_length(config)
    except ValueError:  # an architecture TISA does not support: nothing here knows its table
        return None


def check_sequence_length(
    config: PreTrainedConfig, length: int, tisa: TisaConfig | None = None, name: str = "the model"
) -> None:
    """Raises a UsageError when `name` (with `config`) cannot read `length` tokens.

    `tisa` is the TISA the run gives the model (--tisa.*); None leaves the checkpoint's own (`config.tisa`, if
    any)."""
    own = getattr(config, "tisa", None)
    effective = tisa if tisa is not None else (TisaConfig.from_value(own) if own else None)
    table = position_limit(config, effective)
    if table is not None and length > table:
        why = "TISA mode='add' keeps it" if effective is not None else "no TISA"
        describes = config_position_scheme(config).describes
        replace = (
            "--tisa.mode replace"
            if effective is not None
            else "TISA in replace mode (--tisa.num_kernels 5 --tisa.mode replace)"
        )
        raise UsageError(
            f"--max-seq-length {length} exceeds the {describes} of {name}, {table} positions ({why}); use "
            f"{replace}, which reads any length, or --max-seq-length {table} or less."
        )
