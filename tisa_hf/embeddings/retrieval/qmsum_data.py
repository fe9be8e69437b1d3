"""LongEmbed's QMSum retrieval task (Zhu et al., 2024), rebuilt from QMSum's own files (Zhong et al., 2021).

The documents are the meetings of QMSum's `train` and `val` folders, in that order and by file name within each;
a document's text is its turns as `speaker: content`, one a line (LongEmbed's layout: with it the 197 meetings
average 10,058 whitespace words, as LongEmbed states). The queries are the `answer` texts of every general and
specific query-summary pair, and a query's one relevant document is its meeting. A summary text found in two
meetings is asked once, of the first meeting that has it (QMSum's 1,529 pairs hold two such texts, which leaves
LongEmbed's 1,527 queries); the other meeting then counts as a wrong answer.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ...errors import UsageError
from .corpus_task import Corpus

SPLITS = ("train", "val")


def meeting_files(folder: str | Path) -> list[Path]:
    files = [file for split in SPLITS for file in sorted((Path(folder) / split).glob("*.json"))]
    if not files:
        raise UsageError(
            f"--data {folder} holds no QMSum meetings (train/*.json, val/*.json); pass --data with the folder of "
            "QMSum's train and val meetings (data/ALL of the QMSum repository)."
        )
    return files


@contextmanager
def reading_meeting(file: Path, needs: str) -> Iterator[None]:
    """Reads `file`'s fields inside: one missing or of the wrong kind is refused in one line saying what a QMSum
    meeting needs besides its turns (`needs`)."""
    try:
        yield
    except UsageError:
        raise
    except (ValueError, KeyError, TypeError) as error:
        raise UsageError(
            f"{file} is not a QMSum meeting ({error!r}); it needs meeting_transcripts of {{speaker, content}} turns "
            f"and {needs}."
        ) from error  # chained: where in the reading it failed


def transcript(meeting: dict) -> str:
    return "\n".join(f"{turn['speaker']}: {turn['content']}" for turn in meeting["meeting_transcripts"])


def read_meetings(folder: str | Path, limit: int | None = None) -> Corpus:
    """The task from `folder` (documents named `split/file`); with `limit`, its first `limit` meetings and only the
    queries about them."""
    files = meeting_files(folder)[:limit]
    names, documents, queries, answers, repeated = [], [], [], [], 0
    asked: set[str] = set()
    for index, file in enumerate(files):
        with reading_meeting(file, "general_query_list and specific_query_list of {query, answer}"):
            meeting = json.loads(file.read_text(encoding="utf-8"))
            text = transcript(meeting)
            pairs = meeting["general_query_list"] + meeting["specific_query_list"]
        names.append(f"{file.parent.name}/{file.stem}")
        documents.append(text)
        for pair in pairs:
            if pair["answer"] in asked:
                repeated += 1
                continue
            asked.add(pair["answer"])
            queries.append(pair["answer"])
            answers.append(index)
    return Corpus(names, documents, queries, answers, repeated)
