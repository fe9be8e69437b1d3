"""SemEval-2019 Task 4 (Hyperpartisan News Detection) files: articles XML with inline HTML, and ground-truth XML.

`<article id title published-at>` elements hold the article's HTML (`<p>`, `<a>`, `<q>`, ...) inline. The text
the model reads keeps each paragraph (block element) as one line of normalised whitespace, paragraphs separated
by a blank line, and the text between them (captions, teasers) as paragraphs of its own; HTML entities that the
files escape twice (`&amp;amp;`, `&amp;gt;`) are decoded once more. The title comes first (`Document.full_text`).
Labels (`hyperpartisan="true|false"`) join the articles by id.

Parsed with the standard library's expat parser, driving ElementTree's TreeBuilder, because it reports the
line of every element, which errors name; lxml and BeautifulSoup would add a dependency for no better text.
"""

from __future__ import annotations

import html
import re
import xml.parsers.expat
from dataclasses import dataclass
from pathlib import Path
from xml.etree.ElementTree import Element, TreeBuilder

from ...errors import UsageError
from .files import Document

# HTML elements that start a paragraph of their own; any other element (a, q, em, span, ...) is inline text.
BLOCK_TAGS = frozenset(
    ("p", "div", "br", "hr", "li", "ul", "ol", "dl", "dt", "dd", "blockquote", "pre", "figure", "figcaption")
    + ("h1", "h2", "h3", "h4", "h5", "h6", "table", "tr", "td", "th")
)
LABEL_ATTRIBUTE = "hyperpartisan"
LABELS = ("true", "false")
_WHITESPACE = re.compile(r"\s+")


@dataclass(frozen=True)
class Located:
    """An XML element and the line its start tag is on."""

    element: Element
    line: int


def parse_elements(path: Path, tag: str) -> list[Located]:
    """Every `tag` element of an XML file (whole subtree included), with its line; a malformed file is an error
    naming its line and column."""
    builder, found = TreeBuilder(), []
    parser = xml.parsers.expat.ParserCreate()

    def start(name: str, attributes: dict[str, str]) -> None:
        element = builder.start(name, attributes)
        if name == tag:
            found.append(Located(element, parser.CurrentLineNumber))

    parser.StartElementHandler = start
    parser.EndElementHandler = builder.end
    parser.CharacterDataHandler = builder.data
    try:
        with path.open("rb") as handle:
            parser.ParseFile(handle)
    except xml.parsers.expat.ExpatError as error:
        raise UsageError(
            f"{path}:{error.lineno}:{error.offset + 1}: malformed XML ({xml.parsers.expat.ErrorString(error.code)})."
        ) from None
    except FileNotFoundError:
        raise UsageError(f"{path} does not exist.") from None
    return found


def _paragraph_pieces(element: Element) -> list[str | None]:
    """The element's text as pieces, None marking a paragraph break (before and after every block element)."""
    pieces: list[str | None] = [element.text or ""]
    for child in element:
        block = child.tag.lower() in BLOCK_TAGS
        pieces += [None] if block else []
        pieces += _paragraph_pieces(child)
        pieces += [None] if block else []
        pieces.append(child.tail or "")
    return pieces


def article_text(element: Element) -> str:
    """The article's text: its paragraphs, whitespace normalised, separated by blank lines."""
    paragraphs, current = [], []
    for piece in [*_paragraph_pieces(element), None]:
        if piece is not None:
            current.append(piece)
            continue
        paragraph = _WHITESPACE.sub(" ", html.unescape("".join(current))).strip()
        if paragraph:
            paragraphs.append(paragraph)
        current = []
    return "\n\n".join(paragraphs)


def read_ground_truth(path: Path) -> dict[str, tuple[str, int]]:
    """{article id: (label, line)} from a ground-truth file; a missing or unknown label is an error."""
    labels: dict[str, tuple[str, int]] = {}
    for located in parse_elements(path, "article"):
        where = f"{path}:{located.line}"
        article_id = located.element.get("id")
        if not article_id:
            raise UsageError(f"{where}: <article> without an id.")
        label = located.element.get(LABEL_ATTRIBUTE)
        if label not in LABELS:
            raise UsageError(
                f"{where}: article {article_id} has {LABEL_ATTRIBUTE}={label!r}; expected one of {', '.join(LABELS)}."
            )
        if article_id in labels:
            raise UsageError(f"{where}: article {article_id} is labelled twice (also on line {labels[article_id][1]}).")
        labels[article_id] = (label, located.line)
    if not labels:
        raise UsageError(f"{path} holds no <article> labels.")
    return labels


def read_hyperpartisan(articles_path: Path, labels_path: Path) -> list[Document]:
    """The labelled articles, in file order; an article without id, text or label is an error naming it."""
    labels = read_ground_truth(labels_path)
    documents: list[Document] = []
    lines: dict[str, int] = {}
    for located in parse_elements(articles_path, "article"):
        where = f"{articles_path}:{located.line}"
        article_id = located.element.get("id")
        if not article_id:
            raise UsageError(f"{where}: <article> without an id.")
        if article_id in lines:
            raise UsageError(f"{where}: article {article_id} appears twice (also on line {lines[article_id]}).")
        lines[article_id] = located.line
        text = article_text(located.element)
        if not text:
            raise UsageError(f"{where}: article {article_id} holds no text.")
        if article_id not in labels:
            raise UsageError(f"{where}: article {article_id} has no label in {labels_path}.")
        title = _WHITESPACE.sub(" ", html.unescape(located.element.get("title") or "")).strip()
        documents.append(Document(article_id, text, labels[article_id][0], where, title or None))
    if not documents:
        raise UsageError(f"{articles_path} holds no <article> elements.")
    return documents


def corpus_files(folder: Path) -> tuple[Path, Path, Path]:
    """(articles, ground truth, splits.json) in a folder of the SemEval layout: articles-*.xml,
    ground-truth-*.xml and splits.json."""
    if not folder.is_dir():
        raise UsageError(f"--data-dir {folder} is not a folder.")
    found = []
    for pattern in ("articles-*.xml", "ground-truth-*.xml", "splits.json"):
        matches = sorted(folder.glob(pattern))
        if len(matches) != 1:
            what = "no file" if not matches else f"{len(matches)} files ({', '.join(m.name for m in matches)})"
            raise UsageError(
                f"--data-dir {folder} has {what} matching {pattern}; it takes a folder with one articles-*.xml, "
                "one ground-truth-*.xml and splits.json."
            )
        found.append(matches[0])
    return found[0], found[1], found[2]
