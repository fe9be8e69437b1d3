"""The training rows of `tisa-hf context-train`: documents cut from WikiText training articles (`articles.py`, the
development task's articles), each window's query built as the development task builds it (`windows.py`), and the
place of its window in its document.

An article is cut into documents of at most `document_tokens` tokens holding whole windows of W - 2 tokens: the first
is the article's start, its title line included in its first window (which is asked nothing); each later one is the
title line, then the next windows' text, so that every document names its article once, outside the windows asked
about. A row is (query, document, label): the label is [first, window], the document's first windowed token (1, or
the token after the title line) and the window's number, from which the loss finds the window in the document's
token states. A document's windows are cut again from its own tokens, so the label holds whatever the tokenizer
makes of the joined text.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from transformers import PreTrainedTokenizerBase

from ..errors import UsageError
from .articles import Article
from .windows import window_characters, window_query, window_ranges


@dataclass
class TrainingRows:
    """The rows' columns (`query`, `document`, `label`, the trainer's dataset), and every window's text (read
    apart by the anchor term)."""

    queries: list[str]
    documents: list[str]
    labels: list[list[int]]
    window_texts: list[str]

    def columns(self) -> dict[str, list]:
        return {"query": self.queries, "document": self.documents, "label": self.labels}


def windows_a_document(tokenizer: PreTrainedTokenizerBase, title: str, window: int, document_tokens: int) -> int:
    """How many whole windows a document holds after its [CLS] and title line and before its [SEP]."""
    title_tokens = len(tokenizer(title, add_special_tokens=False)["input_ids"])
    count = (document_tokens - 2 - title_tokens) // (window - 2)
    if count < 1:
        raise UsageError(
            f"--document-tokens {document_tokens} holds no window of {window} tokens after the title line of "
            f"{title!r} ({title_tokens} tokens); give a larger --document-tokens or a smaller --window-tokens."
        )
    return count


def article_documents(
    article: Article, tokenizer: PreTrainedTokenizerBase, window: int, document_tokens: int
) -> list[tuple[str, int]]:
    """The article's documents, each with where its windowed text starts in the article's text."""
    offsets = tokenizer(article.text, return_offsets_mapping=True, verbose=False)["offset_mapping"]
    body = (window - 2) * windows_a_document(tokenizer, article.title, window, document_tokens)
    documents = []
    for number, tokens in enumerate(window_ranges(1, len(offsets) - 1, body)):
        start, stop = window_characters(offsets, tokens)
        documents.append(
            (article.text[:stop], 0) if number == 0 else (f"{article.title}\n{article.text[start:stop]}", start)
        )
    return documents


def build_training_rows(
    articles: list[Article],
    tokenizer: PreTrainedTokenizerBase,
    window: int,
    document_tokens: int,
    words: int,
    titled: bool,
    seed: int = 0,
) -> TrainingRows:
    """The rows of every article, in order; queries drawn from one seeded generator."""
    rng = random.Random(seed)
    rows = TrainingRows([], [], [], [])
    for article in articles:
        for text, start in article_documents(article, tokenizer, window, document_tokens):
            offsets = tokenizer(text, return_offsets_mapping=True, verbose=False)["offset_mapping"]
            first = (
                1 if start == 0 else next(i for i, (a, _) in enumerate(offsets[1:], 1) if a >= len(article.title) + 1)
            )
            for number, tokens in enumerate(window_ranges(first, len(offsets) - 1, window - 2)):
                begin, stop = window_characters(offsets, tokens)
                rows.window_texts.append(text[begin:stop])
                if start == 0 and number == 0:
                    continue  # the title line's window
                heading = article.heading_at(begin if start == 0 else start + begin - len(article.title) - 1)
                query = window_query(article.title, heading, text[begin:stop], words, titled, rng)
                if query is not None:
                    rows.queries.append(query)
                    rows.documents.append(text)
                    rows.labels.append([first, number])
    if not rows.queries:
        raise UsageError(
            f"No window of the training text has {words} words of 5 letters or more to ask by; give a smaller "
            "--query-words, a larger --window-tokens or more text."
        )
    return rows
