"""Which documents train, select and score a model: a fixed split or one fold of cross-validation, from a
splits.json file of document ids.

splits.json holds `split` ({"train": [...], "dev": [...], "test": [...]}) and `folds` (lists of ids that
partition the corpus). Fold K tests on folds[K] and trains on the other folds, less a stratified dev split
(`dev_fraction` of them, drawn with `seed` by scikit-learn's `train_test_split`), so that every document is
tested once over the folds and the dev split depends on the fold and the seed alone, never on the training seed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from sklearn.model_selection import train_test_split

from ...errors import UsageError

FIXED_PARTS = {"train": "train", "validation": "dev", "test": "test"}  # our split name: the file's key


@dataclass(frozen=True)
class SplitsFile:
    path: Path
    fixed: dict[str, list[str]]
    folds: list[list[str]]

    @classmethod
    def read(cls, path: str | Path) -> SplitsFile:
        path = Path(path)
        try:
            content = json.loads(path.read_text(encoding="utf-8"))
        except FileNotFoundError:
            raise UsageError(f"{path} does not exist.") from None
        except json.JSONDecodeError as error:
            raise UsageError(f"{path}:{error.lineno}: malformed JSON ({error.msg}).") from None
        fixed, folds = content.get("split"), content.get("folds")
        if not isinstance(fixed, dict) or not isinstance(folds, list):
            raise UsageError(f"{path} needs a 'split' object (train/dev/test id lists) and a 'folds' list.")
        return cls(path, fixed, folds)


@dataclass(frozen=True)
class SplitPlan:
    """Document ids per split (train, validation, test) and a line saying how they were chosen."""

    ids: dict[str, list[str]]
    description: str


def _check_ids(plan: dict[str, list[str]], known: Mapping[str, str], source: str) -> None:
    seen: dict[str, str] = {}
    for split, ids in plan.items():
        if not ids:
            raise UsageError(f"{source}: the {split} split is empty.")
        for document_id in ids:
            if document_id not in known:
                raise UsageError(f"{source}: document {document_id} ({split}) is not in the corpus.")
            if document_id in seen:
                raise UsageError(f"{source}: document {document_id} is in both {seen[document_id]} and {split}.")
            seen[document_id] = split


def fixed_split(splits: SplitsFile, labels: Mapping[str, str]) -> SplitPlan:
    """train/dev/test exactly as the file lists them."""
    missing = [key for key in FIXED_PARTS.values() if key not in splits.fixed]
    if missing:
        raise UsageError(f"{splits.path}: 'split' lacks {', '.join(missing)}; it needs train, dev and test.")
    plan = {split: list(splits.fixed[key]) for split, key in FIXED_PARTS.items()}
    _check_ids(plan, labels, f"{splits.path} 'split'")
    return SplitPlan(plan, f"the fixed split of {splits.path}")


def fold_split(splits: SplitsFile, fold: int, labels: Mapping[str, str], dev_fraction: float, seed: int) -> SplitPlan:
    """Fold `fold`: test = folds[fold]; the other folds, in file order, less a dev split stratified by label."""
    folds = splits.folds
    if not 0 <= fold < len(folds):
        raise UsageError(f"--fold {fold}: {splits.path} has {len(folds)} folds, numbered 0 to {len(folds) - 1}.")
    _check_ids({f"fold {index}": list(ids) for index, ids in enumerate(folds)}, labels, f"{splits.path} 'folds'")
    in_folds = {document_id for ids in folds for document_id in ids}
    outside = [document_id for document_id in labels if document_id not in in_folds]
    if outside:
        raise UsageError(
            f"{splits.path}: the folds leave out {len(outside)} document(s) of the corpus (first: {outside[0]}); "
            "cross-validation folds must cover it."
        )
    pool = [document_id for index, ids in enumerate(folds) if index != fold for document_id in ids]
    _, dev = train_test_split(
        pool, test_size=dev_fraction, random_state=seed, stratify=[labels[document_id] for document_id in pool]
    )
    dev_ids = set(dev)
    plan = {
        "train": [document_id for document_id in pool if document_id not in dev_ids],
        "validation": [document_id for document_id in pool if document_id in dev_ids],
        "test": list(folds[fold]),
    }
    return SplitPlan(
        plan,
        f"fold {fold} of {len(folds)} in {splits.path}, dev: {dev_fraction:g} of the other folds (stratified, "
        f"seed {seed})",
    )


def plan_split(
    splits: SplitsFile, labels: Mapping[str, str], fold: int | None, dev_fraction: float, seed: int
) -> SplitPlan:
    """The fixed split (`fold` None) or fold `fold`."""
    return fixed_split(splits, labels) if fold is None else fold_split(splits, fold, labels, dev_fraction, seed)


def select(documents: Sequence, ids: list[str]) -> list:
    """The documents with these ids, in the order of `ids`."""
    by_id = {document.id: document for document in documents}
    return [by_id[document_id] for document_id in ids]
