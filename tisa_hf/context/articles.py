"""WikiText articles as documents whose windows do not name their article: the text both `tisa-hf context-passages`
(the development task) and `tisa-hf context-train` (its training rows) cut into windows and ask queries of.

An article is its title line, then each section's heading line (none for the lead) and paragraphs, a line each, with
WikiText's ` @-@ `, ` @,@ ` and ` @.@ ` joins undone (`span_data.article_words`) and every word holding `<unk>` left
out. Its
title is said once, on the first line: every later word equal to one of the title's naming words (those of 4
characters or more with a letter, case kept: "Boulter" of "Robert Boulter", not "of" of "Battle of Hastings") is left
out of the headings and paragraphs, so that a window past the first names its article only through what surrounds
it. An article whose title is all `<unk>` is left out (it has no name to ask by).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..common.saved_files import read_text
from ..common.text import HEADING_MARKERS, TITLE_LINE, WIKITEXT_UNKNOWN
from ..embeddings.retrieval.span_data import article_words
from ..errors import UsageError

NAMING_WORD_LENGTH = 4


@dataclass(frozen=True)
class Article:
    """An article's title, its text (title line first) and per section its first character and heading (the lead
    section's is "", as is a heading of nothing but naming words)."""

    title: str
    text: str
    section_starts: list[int]
    headings: list[str]

    def heading_at(self, character: int) -> str:
        """The heading of the section holding `character` of the text."""
        return self.headings[int(np.searchsorted(self.section_starts, character, side="right")) - 1]


def naming_words(title: str) -> set[str]:
    return {word for word in title.split() if len(word) >= NAMING_WORD_LENGTH and any(c.isalpha() for c in word)}


def clean_words(line: str) -> list[str]:
    return [word for word in article_words(line) if WIKITEXT_UNKNOWN not in word]


def unnamed(line: str, names: set[str]) -> str:
    """The line's clean words without the title's naming words."""
    return " ".join(word for word in clean_words(line) if word not in names)


def build_article(title: str, sections: list[tuple[str, list[str]]]) -> Article:
    """The article from its cleaned title and its sections' raw headings and paragraphs (the lead's heading "")."""
    names = naming_words(title)
    lines, starts, headings = [title], [0], [""]
    offset = len(title) + 1
    for index, (heading, paragraphs) in enumerate(sections):
        heading = unnamed(heading, names)
        kept = [line for line in ([heading] if heading else []) + [unnamed(p, names) for p in paragraphs] if line]
        if not kept:
            continue
        if index:  # the lead section starts with the title line
            starts.append(offset)
            headings.append(heading)
        lines += kept
        offset += sum(len(line) + 1 for line in kept)
    return Article(title, "\n".join(lines), starts, headings)


def read_titled_articles(path: str | Path, limit: int | None = None) -> list[Article]:
    """The articles of a WikiText file (` = Title = ` lines start them, ` = = Heading = = ` lines their sections);
    with `limit`, the first `limit`."""
    articles: list[tuple[str, list[tuple[str, list[str]]]]] = []
    for line in read_text(path).splitlines():
        if not line.strip():
            continue
        title = TITLE_LINE.match(line)
        heading = HEADING_MARKERS.match(line)
        if title:
            articles.append((" ".join(clean_words(title.group(1))), [("", [])]))
        elif not articles:
            continue  # text before the first title belongs to no article
        elif heading:
            articles[-1][1].append((heading.group(1), []))
        else:
            articles[-1][1][-1][1].append(line)
    built = [build_article(title, sections) for title, sections in articles if title]
    if not built:
        raise UsageError(
            f"{path} has no titled article (WikiText's ' = Title = ' lines); pass --data with WikiText-2's test.txt "
            "or valid.txt."
        )
    return built[:limit]
