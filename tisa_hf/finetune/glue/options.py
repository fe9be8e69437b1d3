"""`tisa-hf glue`'s options: the shared model, TISA and training settings, and GLUE's data settings."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..arguments import ModelArguments, TisaArguments, TrainingArguments, require_at_least
from ..task_tables import GLUE_HUB_DATASET, TASKS


@dataclass
class GlueDataArguments:
    task: str = field(default="rte", metadata={"help": f"GLUE task: {' '.join(TASKS)}."})
    data_dir: str | None = field(
        default=None, metadata={"help": "Folder of the original GLUE TSV files (the task folder or its parent)."}
    )
    train_file: str | None = field(default=None, metadata={"help": "Training CSV/JSON file with the Hub columns."})
    validation_file: str | None = field(default=None, metadata={"help": "Dev CSV/JSON file with the Hub columns."})
    dataset_name: str = field(default=GLUE_HUB_DATASET, metadata={"help": "Hub dataset used when no files are given."})
    max_seq_length: int = field(default=128, metadata={"help": "Tokens per example after truncation."})
    max_train_samples: int | None = field(default=None, metadata={"help": "Use only the first N training examples."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Use only the first N dev examples."})

    def __post_init__(self) -> None:
        require_at_least("--max-seq-length", self.max_seq_length, 1)


# The argument dataclasses of the command, parsed in this order.
GLUE_ARGUMENTS = (ModelArguments, TisaArguments, TrainingArguments, GlueDataArguments)
