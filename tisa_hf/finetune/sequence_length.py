"""Whether a model can read inputs of a given length, from its config alone (before any weights load).

TISA `mode="replace"` has no position table, so no limit; a plain model and TISA `mode="add"` keep the table, and
an input longer than it would fail in the first forward (or, for some architectures, index out of range).
"""

from __future__ import annotations

from transformers import PreTrainedConfig

from ..config import TisaConfig
from ..errors import UsageError
from ..patching import config_table_length


def position_limit(config: PreTrainedConfig, tisa: TisaConfig | None) -> int | None:
    """Tokens an input may have: the rows of the position table real tokens use (`config_table_length`); None
    when the model reads any length (TISA `replace` mode) or its architecture is one TISA does not support."""
    if tisa is not None and tisa.mode == "replace":
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
        replace = (
            "--tisa.mode replace"
            if effective is not None
            else "TISA in replace mode (--tisa.num_kernels 5 --tisa.mode replace)"
        )
        raise UsageError(
            f"--max-seq-length {length} exceeds the position table of {name}, {table} positions ({why}); use "
            f"{replace} (no position table: any length), or --max-seq-length {table} or less."
        )
