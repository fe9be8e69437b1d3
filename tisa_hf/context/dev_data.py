"""The data of `tisa-hf context-passages`: every article of a WikiText file (`articles.py`) cut into windows of W
tokens (`windows.py`), and a query for each window but its article's first (which holds the title line), whose one
relevant window is the one it was built for.

The articles are cut at --max-tokens tokens as the runner cuts documents (their first max_tokens - 1 tokens and the
[SEP]), and the windows end there. Queries are drawn in order, article by article, from one seeded generator; a
window with too few words to draw from has none.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

from transformers import PreTrainedTokenizerBase

from ..embeddings.retrieval.corpus_task import Corpus
from ..errors import UsageError
from .articles import Article
from .windows import window_characters, window_query, window_ranges


@dataclass
class ContextPassages(Corpus):
    """The articles (documents), the queries (each one's `answers` entry its article), every article's windows (a
    range of window indices), each window's text, and each query's relevant window."""

    of_article: list[range]
    window_texts: list[str]
    relevant: list[list[int]]


def build_context_passages(
    articles: list[Article],
    tokenizer: PreTrainedTokenizerBase,
    window: int,
    max_tokens: int,
    words: int,
    seed: int = 0,
) -> ContextPassages:
    """The task at windows of `window` tokens, queries of the title, the heading and `words` of the window's words."""
    texts = [article.text for article in articles]
    offsets = tokenizer(texts, return_offsets_mapping=True, verbose=False)["offset_mapping"]
    rng = random.Random(seed)
    of_article, window_texts, queries, answers, relevant = [], [], [], [], []
    for index, article in enumerate(articles):
        body_end = min(len(offsets[index]), max_tokens) - 1
        first_window = len(window_texts)
        for number, tokens in enumerate(window_ranges(1, body_end, window - 2)):
            start, stop = window_characters(offsets[index], tokens)
            text = article.text[start:stop]
            window_texts.append(text)
            query = window_query(article.title, article.heading_at(start), text, words, True, rng) if number else None
            if query is not None:
                queries.append(query)
                answers.append(index)
                relevant.append([len(window_texts) - 1])
        of_article.append(range(first_window, len(window_texts)))
    if not queries:
        raise UsageError(
            f"No window past its article's first has {words} words of 5 letters or more to ask by; give a smaller "
            "--query-words or larger --window-tokens."
        )
    names = [f"article {index}: {article.title}" for index, article in enumerate(articles)]
    return ContextPassages(names, texts, queries, answers, 0, of_article, window_texts, relevant)
