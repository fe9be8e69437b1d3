"""What a checkpoint can do, read from its config alone, so that bad requests fail before any weights load."""

from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
from transformers import AutoConfig, AutoModel, PreTrainedConfig

from ..adapters import find_base_model
from ..config import TisaConfig
from ..finetune.arguments import resolve_model_path
from ..patching import embeddings_length

# Architectures whose checkpoints hold an MLM head that AutoModelForMaskedLM loads.
MLM_HEAD_SUFFIXES = ("ForMaskedLM", "ForPreTraining")


@dataclass(frozen=True)
class CheckpointFacts:
    """`name` as given, its resolved `path`, its TISA settings (None: unpatched), whether it has an MLM head, how
    many positions its table holds and its vocabulary size."""

    name: str
    path: str
    tisa: TisaConfig | None
    has_mlm_head: bool
    table_length: int
    architectures: tuple[str, ...]
    vocab_size: int

    @classmethod
    def read(cls, name: str) -> CheckpointFacts:
        path = resolve_model_path(name)
        try:
            config = AutoConfig.from_pretrained(path)
        except (OSError, ValueError) as error:
            raise ValueError(f"Could not read a model config from {name!r}: {error}".splitlines()[0]) from None
        architectures = tuple(config.architectures or ())
        return cls(
            name=name,
            path=path,
            tisa=TisaConfig.from_value(config.tisa) if config.tisa else None,
            has_mlm_head=any(name.endswith(MLM_HEAD_SUFFIXES) for name in architectures),
            table_length=position_table_length(config),
            architectures=architectures,
            vocab_size=config.vocab_size,
        )

    @property
    def any_length(self) -> bool:
        """Whether it reads inputs of any length (TISA `replace` mode has no position table)."""
        return self.tisa is not None and self.tisa.mode == "replace"

    def reads(self, length: int) -> bool:
        return self.any_length or length <= self.table_length


def position_table_length(config: PreTrainedConfig) -> int:
    """Positions the model's table gives real tokens, from a weightless copy built on the meta device."""
    config = copy.deepcopy(config)
    config.tisa = None
    with torch.device("meta"):
        base, adapter = find_base_model(AutoModel.from_config(config))
    return embeddings_length(base, adapter)
