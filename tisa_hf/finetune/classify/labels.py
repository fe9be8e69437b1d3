"""The classes of a document task, as names: recorded with the run (the model's id2label) and checked on every split.

Labels are strings ("true"/"false", "left"/"center"/"right", "0"/"1"); JSON booleans and integers are read as
their names. The class ids follow `--label-names` when given, otherwise the training labels sorted (numerically
when all are integers), so "false" < "true" and "0" < "1": the positive class of the usual binary names is id 1.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from ...errors import UsageError

# Binary class names whose positive class is known without --positive-label.
POSITIVE_OF_PAIR = {frozenset(("false", "true")): "true", frozenset(("0", "1")): "1", frozenset(("no", "yes")): "yes"}


def label_name(value: object, where: str) -> str:
    """A label read from a file as its class name; `where` (file:line) names it in errors."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        return str(value)
    if isinstance(value, str) and value.strip():
        return value.strip()
    raise UsageError(f"{where}: label {value!r} is not a class name (a non-empty string, integer or boolean).")


def _sorted_names(labels: Iterable[str]) -> tuple[str, ...]:
    names = set(labels)
    if all(name.lstrip("-").isdigit() for name in names):
        return tuple(sorted(names, key=int))
    return tuple(sorted(names))


@dataclass(frozen=True)
class LabelVocabulary:
    """Class names in id order, and `positive`, the class whose F1 is reported (binary tasks; None otherwise)."""

    names: tuple[str, ...]
    positive: str | None

    @classmethod
    def build(
        cls,
        training_labels: Iterable[str],
        source: str,
        names: Sequence[str] | None = None,
        positive: str | None = None,
    ) -> LabelVocabulary:
        """The vocabulary of a task whose training split (`source`, for errors) holds `training_labels`.

        `names` (--label-names) fixes the classes and their order; a binary task needs a positive class, known
        for true/false, 1/0 and yes/no and otherwise named by `positive` (--positive-label)."""
        seen = _sorted_names(training_labels)
        if names is not None:
            if len(set(names)) != len(names):
                raise UsageError(f"--label-names {' '.join(names)} lists a class twice.")
            unknown = [label for label in seen if label not in names]
            if unknown:
                raise UsageError(
                    f"{source} has label(s) {', '.join(unknown)} that --label-names ({', '.join(names)}) lacks."
                )
            ordered = tuple(names)
        else:
            ordered = seen
        if len(ordered) < 2:
            raise UsageError(
                f"{source} has a single class ({', '.join(ordered)}); classification needs at least two "
                "(--label-names lists classes absent from the training data)."
            )
        if positive is None and len(ordered) == 2:
            positive = POSITIVE_OF_PAIR.get(frozenset(name.lower() for name in ordered))
            positive = next((name for name in ordered if name.lower() == positive), None)
            if positive is None:
                raise UsageError(
                    f"The classes are {ordered[0]} and {ordered[1]}: name the positive one (whose F1 is reported) "
                    "with --positive-label."
                )
        if positive is not None and positive not in ordered:
            raise UsageError(f"--positive-label {positive} is not one of the classes {', '.join(ordered)}.")
        return cls(ordered, positive)

    @property
    def num_labels(self) -> int:
        return len(self.names)

    @property
    def positive_id(self) -> int | None:
        return None if self.positive is None else self.names.index(self.positive)

    def id_of(self, label: str, where: str) -> int:
        """The class id of `label`; a label outside the vocabulary is an error naming `where` (file:line)."""
        if label not in self.names:
            raise UsageError(
                f"{where}: label {label!r} is not one of the training classes ({', '.join(self.names)}); "
                "--label-names lists every class when a split holds one the training data lacks."
            )
        return self.names.index(label)

    def id2label(self) -> dict[int, str]:
        """What the model's config records (`config.id2label`; `label2id` is its inverse)."""
        return dict(enumerate(self.names))
