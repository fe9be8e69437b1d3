"""Windows of a document's tokens and the query asked of each, one home for the development task
(`tisa-hf context-passages`) and the training rows (`tisa-hf context-train`), so that training asks what is measured.

A window is W - 2 consecutive tokens of a document's body (between its [CLS] and [SEP]) in the models' tokenizer, in
order from a first body token, the last one shorter (as `tisa-hf qmsum-passages` cuts meetings): W tokens with the
[CLS] and [SEP] it is read apart between. Its text is the document's text from its first token's first character to
its last token's last.

A window's query is built from what sits outside the window and from a few of its own words: the article's title
and the heading of the section the window starts in (`titled`; both are outside the window, whose naming words are
removed, `articles.py`), then `words` distinct words drawn (seeded) from the window's own, each of 5 letters or more
and not the first or last word of the window (which may be cut). The window's own words find it within its article;
across articles, only the title tells two windows of like words apart, and a window read apart has no title.
"""

from __future__ import annotations

import random

QUERY_WORD_LETTERS = 5


def window_ranges(start: int, end: int, step: int) -> list[tuple[int, int]]:
    """The token ranges [first, stop) of the windows of `step` tokens that cut tokens start..end-1 in order."""
    return [(first, min(first + step, end)) for first in range(start, end, step)]


def window_characters(offsets: list[tuple[int, int]], tokens: tuple[int, int]) -> tuple[int, int]:
    """The characters [first, stop) of the text that the window's tokens (`offsets`: each token's) span."""
    return offsets[tokens[0]][0], offsets[tokens[1] - 1][1]


def query_words(text: str) -> list[str]:
    """The window's words a query may take, distinct (first spelling kept) and in order."""
    seen, words = set(), []
    for word in text.split()[1:-1]:
        if len(word) >= QUERY_WORD_LETTERS and word.isalpha() and word.lower() not in seen:
            seen.add(word.lower())
            words.append(word)
    return words


def window_query(title: str, heading: str, text: str, words: int, titled: bool, rng: random.Random) -> str | None:
    """The query of a window of `text` (None: it has fewer than `words` words to draw)."""
    candidates = query_words(text)
    if len(candidates) < words:
        return None
    named = [title, heading] if titled else []
    return " ".join(part for part in [*named, *rng.sample(candidates, words)] if part)
