"""Long documents cut to `--max-seq-length` tokens, special tokens included: `head` keeps the first tokens,
`head+tail` the first `--head-tokens` and the rest from the end (Sun et al., 2019, "How to fine-tune BERT for text
classification?": 128 + 382 at 512 was their best on IMDb, whose reviews, like news articles, conclude at the end).

The whole document is tokenised once, with its special tokens, and the kept word pieces are cut out of it, so
they are exactly the document's own tokens (tokenising a cut text again could merge pieces across the cut).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ...errors import UsageError

if TYPE_CHECKING:  # only in signatures: `--help` of the commands reading these settings imports no datasets
    import datasets

TRUNCATIONS = ("head", "head+tail")


@dataclass(frozen=True)
class Truncation:
    """How a document is cut to `max_length` tokens (special tokens included); `head_tokens` counts with
    `head+tail` only."""

    strategy: str = "head"
    max_length: int = 512
    head_tokens: int = 128

    def __post_init__(self) -> None:
        if self.strategy not in TRUNCATIONS:
            raise UsageError(f"--truncation {self.strategy!r} is not one of {', '.join(TRUNCATIONS)}.")
        if self.max_length < 3:
            raise UsageError(f"--max-seq-length must be at least 3 tokens; got {self.max_length}.")
        if self.strategy == "head+tail" and not 0 <= self.head_tokens < self.max_length:
            raise UsageError(
                f"--head-tokens must be at least 0 and below --max-seq-length {self.max_length}; got "
                f"{self.head_tokens}."
            )

    def kept(self, body: Sequence[int], budget: int) -> list[int]:
        """The positions of `body` (a document's tokens, no special tokens) kept within `budget` tokens."""
        if len(body) <= budget:
            return list(range(len(body)))
        if self.strategy == "head":
            return list(range(budget))
        tail = budget - self.head_tokens
        return [*range(self.head_tokens), *range(len(body) - tail, len(body))]


@dataclass(frozen=True)
class SpecialTokenLayout:
    """How many special tokens a tokenizer puts before and after one sequence ([CLS] x [SEP]: 1 and 1)."""

    before: int
    after: int

    @classmethod
    def of(cls, tokenizer: Any) -> SpecialTokenLayout:
        """Read from a one-word probe, so that a document holding the text of a special token ("[SEP]") cannot
        shift the cut."""
        mask = tokenizer("a", return_special_tokens_mask=True)["special_tokens_mask"]
        before = next(index for index, special in enumerate(mask) if not special)
        after = next(index for index, special in enumerate(reversed(mask)) if not special)
        return cls(before, after)


def encode_documents(texts: list[str], tokenizer: Any, truncation: Truncation) -> dict[str, list[list[int]]]:
    """Tokenizer outputs (input_ids, attention_mask, token_type_ids where the tokenizer makes them) of the cut
    documents, plus `document_tokens`: each document's length in tokens before the cut (special tokens
    excluded)."""
    layout = SpecialTokenLayout.of(tokenizer)
    budget = truncation.max_length - layout.before - layout.after
    if truncation.strategy == "head+tail" and truncation.head_tokens > budget:
        raise UsageError(
            f"--head-tokens {truncation.head_tokens} exceeds the {budget} document tokens that --max-seq-length "
            f"{truncation.max_length} holds besides the special tokens."
        )
    # verbose=False: the whole document is tokenised on purpose, so the "longer than the maximum" warning is noise.
    encoded = tokenizer(texts, return_special_tokens_mask=False, verbose=False)
    result: dict[str, list[list[int]]] = {key: [] for key in encoded}
    result["document_tokens"] = []
    for index in range(len(texts)):
        length = len(encoded["input_ids"][index])
        body = range(layout.before, length - layout.after)
        positions = [
            *range(layout.before),
            *(body[position] for position in truncation.kept(body, budget)),
            *range(length - layout.after, length),
        ]
        for key, values in encoded.items():
            result[key].append([values[index][position] for position in positions])
        result["document_tokens"].append(len(body))
    return result


@dataclass(frozen=True)
class TruncationSummary:
    """How many of a split's documents were cut, and its longest document in tokens (special tokens excluded)."""

    documents: int
    truncated: int
    longest: int


def tokenize_documents(
    splits: datasets.DatasetDict, tokenizer: Any, truncation: Truncation
) -> tuple[datasets.DatasetDict, dict[str, TruncationSummary]]:
    """Model inputs (no padding: the collator pads each batch) with `labels`, and per split what the cut did."""
    budget = truncation.max_length - sum(vars(SpecialTokenLayout.of(tokenizer)).values())

    def encode(rows: dict[str, list]) -> dict[str, list]:
        return {**encode_documents(rows["text"], tokenizer, truncation), "labels": rows["label"]}

    columns = next(iter(splits.values())).column_names
    encoded = splits.map(encode, batched=True, remove_columns=columns, desc="tokenizing")
    summaries = {}
    for split, dataset in encoded.items():
        lengths = dataset["document_tokens"]
        summaries[split] = TruncationSummary(len(lengths), sum(n > budget for n in lengths), max(lengths))
        encoded[split] = dataset.remove_columns("document_tokens")
    return encoded, summaries
