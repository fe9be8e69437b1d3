"""LongEmbed's synthetic retrieval tasks (Zhu et al., 2024), rebuilt offline at exact token lengths.

- passkey: LongEmbed's recipe. The filler "The grass is green. The sky is blue. ..." repeated to the length,
  with "NAME's pass key is NNNNN. Remember it. NNNNN is the pass key for NAME." at a random sentence boundary;
  the query "what is the pass key for NAME?". Every document has its own name and 5-digit key.
- needle: a fact ("Abigail keeps an old telescope in the attic.", `needles.py`) at a random sentence boundary of
  real text, and the question it answers. As in needle-in-a-haystack, every candidate of a length is cut from the
  same window of WikiText articles (starting at a random token): the candidates differ only in their needle and
  where it sits, so Acc@1 measures whether a document's embedding carries its needle. (Windows drawn per
  document would differ in topic too, which swamps a one-sentence needle: in a first build of the task, the
  original MiniLM found 30% of the needles in fully read 256-token documents and 0-4% past 1,024 tokens, with
  every system at that floor.)

Documents are built from token ids, never decoded and re-encoded, so every document of length n is exactly n
tokens of the model's tokenizer, special tokens ([CLS] and [SEP]) counted: the input the model reads. The
needle's tokens appear in it exactly once, and no other candidate holds that needle, so every query has exactly
one right document. Per task and length: `documents` candidates, the first `queries` of which are asked for;
every draw (which needles, keys, windows and positions) comes from a generator seeded with (seed, task, length),
so a length's documents do not depend on which other lengths are asked for.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from transformers import PreTrainedTokenizerBase

from ...common.text import read_articles, tokenize_articles
from ...errors import UsageError
from ..options import TASK_NAMES
from .needles import NAMES, PASSKEY_FILLER, Needle, needle_facts, passkey_needles

SENTENCE_END = re.compile(r"(?<=[.!?])\s+")
KEY_DIGITS = 5
SPECIAL_TOKENS = 2  # [CLS] and [SEP] (`wrap`)


@dataclass(frozen=True)
class Haystack:
    """A token stream to cut documents from, and the offsets in it where a sentence starts (0 included)."""

    tokens: np.ndarray
    sentence_starts: np.ndarray

    @classmethod
    def from_sentences(cls, sentences: list[list[int]]) -> Haystack:
        lengths = np.array([len(sentence) for sentence in sentences])
        starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
        return cls(np.array([token for sentence in sentences for token in sentence], dtype=np.int64), starts)


@dataclass
class RetrievalSet:
    """One task at one length: the candidate documents (token ids), the queries (text and token ids), and per
    query the index of its document; `needles` holds each document's needle tokens (for checks)."""

    task: str
    length: int
    documents: list[list[int]]
    needles: list[list[int]]
    queries: list[str]
    query_ids: list[list[int]]
    answers: list[int]


def passkey_haystack(tokenizer: PreTrainedTokenizerBase, length: int) -> Haystack:
    """The filler's sentences, repeated to at least `length` tokens."""
    sentences = tokenize_articles(SENTENCE_END.split(PASSKEY_FILLER), tokenizer)
    cycle = sum(len(sentence) for sentence in sentences)
    return Haystack.from_sentences(sentences * (length // cycle + 1))


def text_haystack(path: str | Path, tokenizer: PreTrainedTokenizerBase) -> Haystack:
    """The sentences of every article of a text file (WikiText's markers undone), one stream."""
    if not Path(path).is_file():
        raise UsageError(
            f"--text {path}: no such file; pass --text with a plain-text file to cut the needle task's documents "
            "from (WikiText-2's test.txt)."
        )
    try:
        articles = read_articles(path)
    except ValueError as error:
        raise UsageError(f"--text: {error}") from error
    sentences = [sentence for article in articles for sentence in SENTENCE_END.split(article) if sentence]
    return Haystack.from_sentences(tokenize_articles(sentences, tokenizer))


def wrap(body: list[int], tokenizer: PreTrainedTokenizerBase) -> list[int]:
    """`[CLS] body [SEP]` (`<s> body </s>` for RoBERTa): a single sequence of every supported encoder."""
    return [tokenizer.cls_token_id, *body, tokenizer.sep_token_id]


def needle_room(needles: list[list[int]]) -> int:
    """The shortest document that holds every one of `needles`: the longest needle and the special tokens."""
    return max(len(needle) for needle in needles) + SPECIAL_TOKENS


def build_documents(
    haystack: Haystack,
    needles: list[list[int]],
    length: int,
    tokenizer: PreTrainedTokenizerBase,
    rng: np.random.Generator,
    random_start: bool,
) -> list[list[int]]:
    """One document of exactly `length` tokens per needle: hay from `haystack` (from its start, or with
    `random_start` from one random token, the same for every document), the needle at a sentence start of the
    window drawn at random (the end of the window counts when a sentence starts there), the special tokens around
    it. The documents differ only in their needle and where it sits (a shorter needle leaves room for a few more
    tokens of the same hay)."""
    longest_hay = length - SPECIAL_TOKENS - min(len(needle) for needle in needles)
    start = int(rng.integers(0, len(haystack.tokens) - longest_hay + 1)) if random_start else 0
    documents = []
    for needle in needles:
        hay = length - SPECIAL_TOKENS - len(needle)
        window = haystack.tokens[start : start + hay]
        starts = haystack.sentence_starts
        inside = starts[(starts >= start) & (starts <= start + hay)] - start
        at = int(rng.choice(inside)) if len(inside) else 0  # a window inside one sentence: the document's start
        body = [*window[:at].tolist(), *needle, *window[at:].tolist()]
        documents.append(wrap(body, tokenizer))
    return documents


def build_task(
    task: str,
    length: int,
    tokenizer: PreTrainedTokenizerBase,
    documents: int,
    queries: int,
    seed: int,
    text_stream: Haystack | None = None,
) -> RetrievalSet:
    """The candidates and queries of `task` at `length` (`text_stream`: the needle task's real text)."""
    rng = np.random.default_rng([seed, TASK_NAMES.index(task), length])
    chosen = rng.permutation(len(NAMES))[:documents]
    if task == "passkey":
        low = 10 ** (KEY_DIGITS - 1)
        keys = (rng.choice(9 * low, size=len(NAMES), replace=False) + low).tolist()
        pool: list[Needle] = passkey_needles(keys)
        haystack = passkey_haystack(tokenizer, length)
    else:
        pool = needle_facts()
        haystack = text_stream
    pool_tokens = tokenize_articles([needle.text for needle in pool], tokenizer)
    room = needle_room(pool_tokens)
    if length < room:
        raise UsageError(
            f"--lengths {length} is shorter than the {task} needle: its longest takes {room} tokens with the special "
            f"tokens; give lengths of at least {room}."
        )
    hay = length - SPECIAL_TOKENS - min(len(needle) for needle in pool_tokens)  # the most a document can need
    if len(haystack.tokens) < hay:
        raise UsageError(
            f"The --text holds {len(haystack.tokens)} tokens, too few for --lengths {length} (a document needs up to "
            f"{hay} tokens of text); give a longer text or shorter lengths."
        )
    picked = [pool[index] for index in chosen]
    needle_tokens = [pool_tokens[index] for index in chosen]
    built = build_documents(haystack, needle_tokens, length, tokenizer, rng, random_start=task == "needle")
    asked = [needle.query for needle in picked[:queries]]
    query_ids = tokenizer(asked)["input_ids"]
    return RetrievalSet(task, length, built, needle_tokens, asked, query_ids, list(range(len(asked))))
