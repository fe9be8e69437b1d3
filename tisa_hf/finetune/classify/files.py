"""Labelled documents from CSV, JSON lines or JSON files: one document per row, with text, label and optional
title columns.

Read by hand rather than with `datasets.load_dataset("csv")`: pandas infers types (the labels "true" and "01"
become True and 1), and neither its errors nor the JSON builder's name the file's line. Every value stays a
string here, and every error names the file and line.
"""

from __future__ import annotations

import csv
import json
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from ...errors import UsageError
from .labels import label_name

SUFFIXES = (".csv", ".jsonl", ".json")


@dataclass(frozen=True)
class Document:
    """One labelled document; `where` (file:line, or the article id and file) names it in errors."""

    id: str
    text: str
    label: str
    where: str
    title: str | None = None

    @property
    def full_text(self) -> str:
        """What the model reads: the title, when there is one, as the first paragraph."""
        return f"{self.title}\n\n{self.text}" if self.title else self.text


@dataclass(frozen=True)
class Columns:
    """The names of the text, label and (optional) title columns."""

    text: str = "text"
    label: str = "label"
    title: str | None = None

    def required(self) -> tuple[str, ...]:
        return (self.text, self.label) if self.title is None else (self.text, self.label, self.title)

    def option_of(self, name: str) -> str:
        return {self.text: "--text-column", self.label: "--label-column", self.title: "--title-column"}[name]


def _records(path: Path) -> Iterator[tuple[int, dict]]:
    """(line, record) pairs of a CSV file (header first) or JSON file (a list of objects, or one object a line)."""
    if path.suffix.lower() == ".csv":
        csv.field_size_limit(sys.maxsize)  # long documents exceed the csv module's 128 KiB default field limit
        with path.open(encoding="utf-8-sig", newline="") as handle:
            rows = csv.reader(handle)
            header = next(rows, None)
            if header is None:
                raise UsageError(f"{path}:1: empty CSV file, expected a header row.")
            for row in rows:
                if not row:
                    continue
                if len(row) != len(header):
                    raise UsageError(f"{path}:{rows.line_num}: expected {len(header)} fields, found {len(row)}.")
                yield rows.line_num, dict(zip(header, row, strict=True))
        return
    text = path.read_text(encoding="utf-8")
    if path.suffix.lower() == ".json" and text.lstrip().startswith("["):
        try:
            records = json.loads(text)
        except json.JSONDecodeError as error:
            raise UsageError(f"{path}:{error.lineno}: malformed JSON ({error.msg}).") from None
        for number, record in enumerate(records, start=1):
            yield number, record
        return
    for number, line in enumerate(text.splitlines(), start=1):
        if line.strip():
            try:
                yield number, json.loads(line)
            except json.JSONDecodeError as error:
                raise UsageError(f"{path}:{number}: malformed JSON line ({error.msg}).") from None


def read_documents(path: str | Path, columns: Columns) -> list[Document]:
    """The documents of one file; a missing column, an empty text or a malformed row is an error naming the file
    and line (and, for a missing column, the columns the file has)."""
    path = Path(path)
    if path.suffix.lower() not in SUFFIXES:
        raise UsageError(f"{path}: document files are .csv, .jsonl or .json, not {path.suffix or 'without suffix'}.")
    if not path.is_file():
        raise UsageError(f"Data file {path} does not exist.")
    documents = []
    for line, record in _records(path):
        where = f"{path}:{line}"
        if not isinstance(record, dict):
            raise UsageError(f"{where}: expected an object of columns, found {type(record).__name__}.")
        missing = [name for name in columns.required() if name not in record]
        if missing:
            name = missing[0]
            raise UsageError(
                f"{where}: no column {name!r} ({columns.option_of(name)}); the columns are {', '.join(record)}."
            )
        text = record[columns.text]
        if not isinstance(text, str) or not text.strip():
            raise UsageError(f"{where}: column {columns.text!r} holds no text.")
        title = record[columns.title] if columns.title else None
        if title is not None and not isinstance(title, str):
            raise UsageError(f"{where}: column {columns.title!r} holds {type(title).__name__}, not text.")
        label = label_name(record[columns.label], where)
        documents.append(Document(where, text, label, where, title.strip() if title else None))
    if not documents:
        raise UsageError(f"{path} holds no documents; every split needs at least one.")
    return documents
