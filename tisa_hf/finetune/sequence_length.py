"""Whether a model can read inputs of a given length, from its config alone (before any weights load).

TISA `mode="replace"` has no position table, so no limit; a plain model and TISA `mode="add"` keep the table, and
an input longer than it would fail in the first forward (or, for some architectures, index out of range).
"""

from __future__ import annotations

import torch
from transformers import AutoModel, PreTrainedConfig

from ..adapters import find_base_model
from ..config import TisaConfig
from ..errors import UsageError
from ..model_configs import plain_model_config
from ..patching import position_table_length


def table_length(config: PreTrainedConfig) -> int:
    """Positions the model's table holds for real tokens (RoBERTa's padding rows excluded), read from the
    architecture built on the meta device, where the adapter knows the table."""
    with torch.device("meta"):
        base, adapter = find_base_model(AutoModel.from_config(plain_model_config(config)))
    return position_table_length(base, adapter)


def check_sequence_length(
    config: PreTrainedConfig, length: int, tisa: TisaConfig | None = None, name: str = "the model"
) -> None:
    """Raises a UsageError when `name` (with `config`) cannot read `length` tokens.

    `tisa` is the TISA the run gives the model (--tisa.*); None leaves the checkpoint's own (`config.tisa`, if
    any)."""
    own = getattr(config, "tisa", None)
    effective = tisa if tisa is not None else (TisaConfig.from_value(own) if own else None)
    if effective is not None and effective.mode == "replace":
        return
    table = table_length(config)
    if length > table:
        why = "TISA mode='add' keeps it" if effective is not None else "no TISA"
        raise UsageError(
            f"--max-seq-length {length} exceeds the position table of {name}, {table} positions ({why}); use "
            f"--tisa.mode replace (no position table: any length), or --max-seq-length {table} or less."
        )
