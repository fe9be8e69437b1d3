"""What every task's data splits go through before a model is loaded: at least one example each, and the
`--max-*-samples` limits."""

from __future__ import annotations

from datasets import Dataset

from ..errors import UsageError


def no_examples(source: str) -> UsageError:
    return UsageError(f"{source} holds no examples; training and evaluation need at least one in every split.")


def require_examples(dataset: Dataset, source: str) -> Dataset:
    """`dataset`, or a UsageError naming `source` when it holds no examples (training and scoring need some)."""
    if len(dataset) == 0:
        raise no_examples(source)
    return dataset


def first_examples(dataset: Dataset, limit: int | None, option: str) -> Dataset:
    """The first `limit` examples (all when None); `option` names the setting in errors."""
    if limit is None:
        return dataset
    if limit < 1:
        raise UsageError(f"{option} must be at least 1, got {limit}.")
    return dataset.select(range(min(limit, len(dataset))))
