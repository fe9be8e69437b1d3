"""The development retrieval task of the long-reading variants: passages cut from WikiText articles, each to find
its own article among all of them.

Whole articles are the candidates, so candidates differ in topic (unlike passkey and needle, whose candidates share
one filler), and a passage deep inside a long article is only found by a reader that reaches it: the task asks
whether one embedding of a whole natural document keeps its parts visible. It is built from held-out text
(WikiText-2's test.txt: the adaptation trains on valid.txt), never from QMSum, which is kept for evaluation.

An article's text is its lines with WikiText's ` @-@ `, ` @,@ ` and ` @.@ ` joins undone and its `<unk>` words left
out. Each article of at least `2 * span_words` words gives `spans_per_article` passages of `span_words` words,
starting at word offsets drawn uniformly (seeded) over the article, each at least `span_words` apart, in order.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from pathlib import Path

from ...common.text import WIKITEXT_MARKERS, WIKITEXT_UNKNOWN, read_articles
from ...errors import UsageError
from .corpus_task import Corpus


@dataclass
class SpanTask(Corpus):
    """A corpus whose documents are articles and whose queries are passages of them, with each passage's
    starting word in its article (`depths`)."""

    depths: list[int]


def article_words(article: str) -> list[str]:
    for marker, joined in WIKITEXT_MARKERS.items():
        article = article.replace(marker, joined)
    return [word for word in article.split() if word != WIKITEXT_UNKNOWN]


def span_starts(words: int, count: int, span_words: int, rng: random.Random) -> list[int]:
    """`count` sorted starting offsets in [0, words - span_words], pairwise at least `span_words` apart (so that no
    two passages overlap), drawn as the sorted offsets of `count` non-overlapping slots."""
    slack = words - count * span_words
    cuts = sorted(rng.randint(0, slack) for _ in range(count))
    return [cut + index * span_words for index, cut in enumerate(cuts)]


def read_span_task(
    path: str | Path, spans_per_article: int = 3, span_words: int = 48, seed: int = 0, limit: int | None = None
) -> SpanTask:
    """The task from the text file at `path`; with `limit`, its first `limit` usable articles."""
    if not Path(path).is_file():
        raise UsageError(
            f"--data {path}: no such file; pass --data with a WikiText-style text of held-out articles to cut the "
            "passages from (WikiText-2's test.txt)."
        )
    rng = random.Random(seed)
    articles = [article_words(article) for article in read_articles(path)]
    usable = [words for words in articles if len(words) >= max(2, spans_per_article) * span_words]
    if not usable:
        raise UsageError(
            f"{path} has no article of {max(2, spans_per_article) * span_words} words or more to cut "
            f"{spans_per_article} passages of {span_words} words from; pass --data with longer articles "
            "(WikiText-2's test.txt) or a smaller --span-words."
        )
    usable = usable[:limit]
    names, documents, queries, answers, depths = [], [], [], [], []
    for index, words in enumerate(usable):
        names.append(f"article {index}: {' '.join(words[:8])}")
        documents.append(" ".join(words))
        for start in span_starts(len(words), spans_per_article, span_words, rng):
            queries.append(" ".join(words[start : start + span_words]))
            answers.append(index)
            depths.append(start)
    return SpanTask(names, documents, queries, answers, 0, depths)
