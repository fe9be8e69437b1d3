"""A corpus file, read and checked before anything heavy loads (no torch): its documents, one a line, from a JSON
Lines file (the text under a field) or a plain-text file, and their own ids where the objects carry them.

`tisa-hf encode` and `index` read their --input here and `tisa-hf search` its --queries; the command line reads them
once more before the command imports torch (`commands/cli.py`), so that a bad line is one line at once rather
than after seconds of imports.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..common.result_files import check_out_folder
from ..errors import UsageError

DEFAULT_ID_FIELD = "id"  # read when the first object has it, unless --id-field names another
JSON_TYPES = {bool: "true or false", int: "a number", float: "a number", list: "a list", dict: "an object"}


@dataclass(frozen=True)
class CorpusFile:
    """The documents of a corpus file in order, and each one's id (None: the file gives none)."""

    texts: list[str]
    ids: list[str | int] | None = None
    id_field: str | None = None


def json_type(value: Any) -> str:
    return "null" if value is None else JSON_TYPES[type(value)]


def checked_file(path: str, option: str, what: str) -> Path:
    """`path` as a file `option` can read; a folder or nothing there is one line saying which."""
    file = Path(path)
    if file.is_dir():
        raise UsageError(f"{option} {path} is a folder; give a JSON Lines file or a text file, one {what} a line.")
    if not file.is_file():
        raise UsageError(f"{option} {path}: no such file; give a JSON Lines file or a text file, one {what} a line.")
    return file


def read_corpus(
    path: str,
    text_field: str,
    option: str = "--input",
    field_option: str = "--text-field",
    what: str = "document",
    *,
    with_ids: bool = False,
    id_field: str | None = None,
) -> CorpusFile:
    """The documents of a .jsonl file (`text_field` of each object) or of a text file (one a line), `with_ids` the
    ids under `id_field` (default: `DEFAULT_ID_FIELD` when the first object has one). A blank line, a line without the
    text, a text that is not a string, a missing or repeated id are each one error naming the file and line, since
    skipping the line would shift every later row. `option` and `field_option` name the command's options in the
    messages, `what` a text (`tisa-hf search` reads its queries here)."""
    file = checked_file(path, option, what)
    lines = file.read_text(encoding="utf-8").splitlines()
    is_json = file.suffix == ".jsonl"
    with_ids = with_ids or id_field is not None
    if id_field is not None and not is_json:
        raise UsageError(
            f"--id-field {id_field}: {path} is a text file, whose lines have no fields; give a .jsonl file."
        )
    texts: list[str] = []
    ids: dict[str | int, int] = {}
    for number, line in enumerate(lines, start=1):
        where = f"{path}:{number}"
        if not line.strip():
            raise UsageError(f"{where}: a blank line; give one {what} a line, with no blank lines between.")
        if not is_json:
            texts.append(line)
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as error:
            raise UsageError(f"{where}: not a JSON object ({error.msg}); a .jsonl file holds one a line.") from error
        if not isinstance(row, dict) or text_field not in row:
            raise UsageError(f"{where}: no text under {text_field!r}; name the field with {field_option}.")
        if not isinstance(row[text_field], str):
            raise UsageError(
                f"{where}: the value under {text_field!r} is {json_type(row[text_field])}, not a string; give each "
                f"{what}'s text as a JSON string."
            )
        texts.append(row[text_field])
        if number == 1 and with_ids and id_field is None and DEFAULT_ID_FIELD in row:
            id_field = DEFAULT_ID_FIELD
        if id_field is not None:
            ids[checked_id(row, id_field, ids, where, what)] = number
    if not texts:
        raise UsageError(f"{option} {path} holds no {what}s.")
    return CorpusFile(texts, list(ids) if id_field is not None else None, id_field)


def checked_id(row: dict[str, Any], id_field: str, seen: dict[str | int, int], where: str, what: str) -> str | int:
    """The id of `row`: a string or a whole number, not one an earlier line has."""
    if id_field not in row:
        raise UsageError(
            f"{where}: no id under {id_field!r}; give every {what} one, or name the field with --id-field."
        )
    value = row[id_field]
    if isinstance(value, bool) or not isinstance(value, str | int):
        raise UsageError(
            f"{where}: the id under {id_field!r} is {json_type(value)}, not a string or a whole number; give every "
            f"{what} one of those."
        )
    if value in seen:
        raise UsageError(f"{where}: id {value!r} is line {seen[value]}'s too; give each {what} its own id.")
    return value


def read_documents(
    path: str, text_field: str, option: str = "--input", field_option: str = "--text-field", what: str = "document"
) -> list[str]:
    """The texts alone of `read_corpus`."""
    return read_corpus(path, text_field, option, field_option, what).texts


def input_digest(path: str, text_field: str) -> str:
    digest = hashlib.sha256(Path(path).read_bytes())
    digest.update(text_field.encode())
    return digest.hexdigest()


def check_encode_files(args: argparse.Namespace) -> list[str]:
    """What `tisa-hf encode` checks before torch is imported: the engine options first, then --out, --input, read
    whole, and the model (a folder with its tokenizer, or a Hub id the Hub or its cache can give: the one check
    that may ask the Hub, so the last); returns the documents."""
    from ..common.hub_access import model_source  # light, as the rest: no torch
    from .ray_cluster import check_engine  # light: it imports Ray only for --engine ray

    check_engine(args)
    check_out_folder(args.out)
    documents = read_documents(args.input, args.text_field)
    model_source(args.model, "model", needs_tokenizer=True)
    return documents
