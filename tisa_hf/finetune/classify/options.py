"""Data and input-length settings of long-document classification (`tisa-hf classify`), parsed by
`transformers.HfArgumentParser` like the other fine-tuning settings (`tisa_hf.finetune.arguments`). Settings that
cannot work are refused on construction. Light to import: `tisa-hf classify --help` reads them."""

from __future__ import annotations

from dataclasses import dataclass, field

from ...errors import UsageError
from ..arguments import ModelArguments, TisaArguments, TrainingArguments
from .files import Columns
from .truncation import Truncation

SPLITS = ("fixed", "fold")


@dataclass
class DocumentDataArguments:
    data_dir: str | None = field(
        default=None,
        metadata={
            "help": "Folder of the SemEval-2019 Hyperpartisan by-article set: articles-*.xml, ground-truth-*.xml "
            "and splits.json."
        },
    )
    split: str | None = field(
        default=None,
        metadata={"help": "With --data-dir: 'fixed' (train/dev/test of splits.json; the default) or 'fold'."},
    )
    fold: int | None = field(
        default=None,
        metadata={"help": "With --data-dir: test on folds[K] of splits.json, train on the other folds."},
    )
    dev_fraction: float = field(
        default=0.1, metadata={"help": "With --fold: fraction of the training folds held out as the dev split."}
    )
    dev_split_seed: int = field(
        default=0, metadata={"help": "With --fold: seed of the stratified dev split (not the training seed)."}
    )
    train_file: str | None = field(default=None, metadata={"help": "Training documents: .csv, .jsonl or .json."})
    validation_file: str | None = field(default=None, metadata={"help": "Dev documents (same format)."})
    test_file: str | None = field(default=None, metadata={"help": "Test documents (same format; optional)."})
    text_column: str = field(default="text", metadata={"help": "Column of the document text."})
    label_column: str = field(default="label", metadata={"help": "Column of the class name."})
    title_column: str | None = field(default=None, metadata={"help": "Column of a title read before the text."})
    label_names: list[str] | None = field(
        default=None, metadata={"help": "Every class, in id order (default: the training labels, sorted)."}
    )
    positive_label: str | None = field(
        default=None,
        metadata={"help": "The class whose F1 is reported (known for true/false, 1/0, yes/no)."},
    )
    max_seq_length: int = field(
        default=512,
        metadata={
            "help": "Tokens per document after truncation, special tokens included; beyond the position table "
            "only with --tisa.mode replace or --position-interpolation."
        },
    )
    truncation: str = field(
        default="head",
        metadata={"help": "'head' (the first tokens) or 'head+tail' (--head-tokens first, the rest from the end)."},
    )
    head_tokens: int = field(default=128, metadata={"help": "With --truncation head+tail: tokens from the start."})
    position_interpolation: bool = field(
        default=False,
        metadata={
            "help": "Stretch a plain model's position table to --max-seq-length by linear position interpolation "
            "(the table then trains with the model, and the saved model reads that length); no TISA."
        },
    )
    max_train_samples: int | None = field(default=None, metadata={"help": "Use only the first N training documents."})
    max_eval_samples: int | None = field(
        default=None, metadata={"help": "Use only the first N dev and test documents."}
    )

    def __post_init__(self) -> None:
        files = {"--train-file": self.train_file, "--validation-file": self.validation_file}
        if self.data_dir and any((*files.values(), self.test_file)):
            raise UsageError("Give either --data-dir (the Hyperpartisan folder) or --train-file and friends, not both.")
        if not self.data_dir:
            missing = [option for option, value in files.items() if not value]
            if missing:
                raise UsageError(f"{' and '.join(missing)} missing: give them (and --test-file) or --data-dir.")
            if self.split is not None or self.fold is not None:
                raise UsageError("--split and --fold choose documents of --data-dir; files are their own splits.")
        if self.split is not None and self.split not in SPLITS:
            raise UsageError(f"--split {self.split!r} is not one of {', '.join(SPLITS)}.")
        if self.split == "fold" and self.fold is None:
            raise UsageError("--split fold needs --fold K, the fold to test on.")
        if self.split == "fixed" and self.fold is not None:
            raise UsageError(f"--split fixed and --fold {self.fold} exclude each other.")
        if not 0.0 < self.dev_fraction < 1.0:
            raise UsageError(f"--dev-fraction must lie strictly between 0 and 1; got {self.dev_fraction}.")
        for option, value in (
            ("--max-train-samples", self.max_train_samples),
            ("--max-eval-samples", self.max_eval_samples),
        ):
            if value is not None and value < 1:
                raise UsageError(f"{option} must be at least 1; got {value}.")
        self.truncation_plan()

    def truncation_plan(self) -> Truncation:
        return Truncation(self.truncation, self.max_seq_length, self.head_tokens)

    def columns(self) -> Columns:
        return Columns(self.text_column, self.label_column, self.title_column)


# The argument dataclasses of `tisa-hf classify`, parsed in this order.
CLASSIFY_ARGUMENTS = (ModelArguments, TisaArguments, TrainingArguments, DocumentDataArguments)
