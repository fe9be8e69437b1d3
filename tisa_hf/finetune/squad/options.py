"""`tisa-hf squad`'s options: the shared model, TISA and training settings, and SQuAD's data and decoding settings.

SquadArguments is the one source of SQuAD's data settings (max_seq_length, train_file, ...): GLUE's data
arguments, with fields of the same names, are not part of the command."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from ...errors import UsageError
from ..arguments import ModelArguments, TisaArguments, TrainingArguments, require_at_least


@dataclass
class SquadArguments:
    """SQuAD data and decoding settings (defaults: the ALBERT paper's)."""

    version_2_with_negative: bool = field(default=False, metadata={"help": "SQuAD v2.0 (unanswerable questions)."})
    train_file: str | None = field(default=None, metadata={"help": "Official-format SQuAD JSON (default: the Hub)."})
    validation_file: str | None = field(default=None, metadata={"help": "Official-format SQuAD JSON for dev."})
    max_seq_length: int = field(default=384, metadata={"help": "Tokens per feature (question + context window)."})
    doc_stride: int = field(default=128, metadata={"help": "Tokens shared by consecutive windows of a context."})
    n_best_size: int = field(default=20, metadata={"help": "Start and end candidates per feature."})
    max_answer_length: int = field(default=30, metadata={"help": "Longest answer, in tokens."})
    null_score_diff_threshold: float = field(
        default=0.0, metadata={"help": "v2: answer '' when the null score beats the best span by more than this."}
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Keep only the first N train examples."})
    max_eval_samples: int | None = field(default=None, metadata={"help": "Keep only the first N dev examples."})

    def __post_init__(self) -> None:
        """The window sizes as such; `data.check_windows` checks them against the tokenizer and questions."""
        require_at_least("--max-seq-length", self.max_seq_length, 1)
        require_at_least("--doc-stride", self.doc_stride, 0)
        if self.doc_stride >= self.max_seq_length:
            raise UsageError(
                f"--doc-stride ({self.doc_stride}) must be smaller than --max-seq-length ({self.max_seq_length})."
            )
        require_at_least("--n-best-size", self.n_best_size, 1)
        require_at_least("--max-answer-length", self.max_answer_length, 1)
        if not math.isfinite(self.null_score_diff_threshold):
            raise UsageError(f"--null-score-diff-threshold must be finite; got {self.null_score_diff_threshold}.")


# The argument dataclasses of the command, parsed in this order.
SQUAD_ARGUMENTS = (ModelArguments, TisaArguments, TrainingArguments, SquadArguments)
