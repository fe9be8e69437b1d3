"""What a checkpoint can do, read from its config alone, so that bad requests fail before any weights load."""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import AutoConfig, AutoModelForMaskedLM, PreTrainedConfig

from ..config import TisaConfig
from ..errors import UsageError
from ..hub_access import model_source
from ..model_configs import plain_model_config
from ..patching import config_table_length
from .objectives import mlm_head_of

# Architectures whose checkpoints hold an MLM head that AutoModelForMaskedLM loads.
MLM_HEAD_SUFFIXES = ("ForMaskedLM", "ForPreTraining")


@dataclass(frozen=True)
class CheckpointFacts:
    """`name` as given, its resolved `path`, its TISA settings (None: unpatched), whether it has an MLM head, how
    many positions its table holds, its vocabulary size and whether it loads from the local cache only."""

    name: str
    path: str
    config: PreTrainedConfig
    tisa: TisaConfig | None
    has_mlm_head: bool
    table_length: int
    architectures: tuple[str, ...]
    vocab_size: int
    local_files_only: bool = False  # the Hub is out of reach, but its cache holds the model

    @classmethod
    def read(cls, name: str, option: str = "--model") -> CheckpointFacts:
        """The facts of `name` (given as `option`, for the messages), which `model_source` checks first."""
        source = model_source(name, option)
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
            architectures=architectures,
            vocab_size=config.vocab_size,
            local_files_only=source.local_files_only,
        )

    @property
    def any_length(self) -> bool:
        """Whether it reads inputs of any length (TISA `replace` mode has no position table)."""
        return self.tisa is not None and self.tisa.mode == "replace"

    def reads(self, length: int) -> bool:
        return self.any_length or length <= self.table_length

    def check_mlm_head_module(self) -> None:
        """A ValueError, before any weights load, if the architecture's MLM head is not one module."""
        with torch.device("meta"):
            mlm_head_of(AutoModelForMaskedLM.from_config(plain_model_config(self.config)))
