"""Long-document classification data: the Hyperpartisan folder (--data-dir, split by splits.json) or the user's
own CSV/JSON files (--train-file, --validation-file, --test-file), as a `datasets.DatasetDict` of `id`, `text`
(the title first, when there is one) and `label` (the class id), with the label vocabulary that maps class names
to ids. Everything is read and checked here, before any model is loaded.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import datasets

from ..splits import first_examples
from .files import Document, read_documents
from .folds import SplitsFile, plan_split, select
from .hyperpartisan import corpus_files, read_hyperpartisan
from .labels import LabelVocabulary
from .options import DocumentDataArguments


@dataclass(frozen=True)
class DocumentData:
    """The splits (train, validation, and test where there is one), the label vocabulary and a line saying where
    the documents came from and how they were split (for the run's record)."""

    splits: datasets.DatasetDict
    labels: LabelVocabulary
    description: str


def _documents_by_split(args: DocumentDataArguments) -> tuple[dict[str, list[Document]], str, str]:
    """({split: documents}, the training source for errors, the description)."""
    if args.data_dir:
        articles, ground_truth, splits_path = corpus_files(Path(args.data_dir))
        documents = read_hyperpartisan(articles, ground_truth)
        labels = {document.id: document.label for document in documents}
        plan = plan_split(SplitsFile.read(splits_path), labels, args.fold, args.dev_fraction, args.dev_split_seed)
        by_split = {split: select(documents, ids) for split, ids in plan.ids.items()}
        return (
            by_split,
            f"the training split of {articles}",
            f"{articles} labelled by {ground_truth}; {plan.description}",
        )
    files = {"train": args.train_file, "validation": args.validation_file, "test": args.test_file}
    by_split = {split: read_documents(path, args.columns()) for split, path in files.items() if path}
    return by_split, args.train_file, ", ".join(f"{split}: {path}" for split, path in files.items() if path)


def to_dataset(documents: list[Document], labels: LabelVocabulary) -> datasets.Dataset:
    return datasets.Dataset.from_dict(
        {
            "id": [document.id for document in documents],
            "text": [document.full_text for document in documents],
            "label": [labels.id_of(document.label, document.where) for document in documents],
        }
    )


def load_documents(args: DocumentDataArguments) -> DocumentData:
    """The task's splits and label vocabulary, cut to --max-train-samples / --max-eval-samples."""
    by_split, training_source, description = _documents_by_split(args)
    labels = LabelVocabulary.build(
        (document.label for document in by_split["train"]), training_source, args.label_names, args.positive_label
    )
    splits = datasets.DatasetDict()
    for split, documents in by_split.items():
        limit, option = (
            (args.max_train_samples, "--max-train-samples")
            if split == "train"
            else (args.max_eval_samples, "--max-eval-samples")
        )
        splits[split] = first_examples(to_dataset(documents, labels), limit, option)
    return DocumentData(splits, labels, description)
