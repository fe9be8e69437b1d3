"""QMSum's query-based passages (Zhong et al., 2021): each specific query of QMSum's `train` and `val` meetings is to
find the windows of its meeting that hold its relevant turns.

The meetings are `qmsum_data.py`'s (the same files, order, names and text: a turn a line, `speaker: content`). A
query is the `query` text of a specific query-answer pair (a question such as "What did C think about ...?"), and
its relevant turns are its `relevant_text_span` ranges, both ends included (`[["19", "89"]]`: turns 19 to 89). The
general queries are left out: their texts are a few requests for a whole meeting's summary ("Summarize the whole
meeting."), which name no meeting, and within their meeting every window would be relevant. A query text that
several meetings ask is asked of each, with that meeting's windows relevant.

Windows are aligned to tokens, not turns (`cut_windows`): each meeting's tokens in the models' tokenizer, between its
[CLS] and [SEP], cut in order into windows of W - 2 tokens (the last one shorter), so that a window read apart is W
tokens with its own [CLS] and [SEP], and a turn may straddle two windows. A window is relevant to a query when one
of its tokens is in one of the query's relevant turns (binary relevance). A window's text, which BM25 reads, is its
meeting's text from its first token's first character to its last token's last.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from transformers import PreTrainedTokenizerBase

from ...errors import UsageError
from .corpus_task import Corpus
from .qmsum_data import meeting_files, reading_meeting, transcript


@dataclass
class MeetingQueries(Corpus):
    """QMSum's meetings and specific queries (each query's `answers` entry is its meeting), with each turn's first
    character in its meeting's text and each query's relevant turns as (first, last) ranges."""

    turn_starts: list[list[int]]
    relevant_turns: list[list[tuple[int, int]]]


def turn_starts(meeting: dict) -> list[int]:
    """Each turn's first character in `transcript(meeting)`: one line a turn, joined by newlines."""
    lengths = [len(f"{turn['speaker']}: {turn['content']}") + 1 for turn in meeting["meeting_transcripts"]]
    return np.concatenate([[0], np.cumsum(lengths[:-1])]).astype(int).tolist()


def relevant_ranges(file: Path, pair: dict, turns: int) -> list[tuple[int, int]]:
    ranges = [(int(first), int(last)) for first, last in pair["relevant_text_span"]]
    for first, last in ranges:
        if not 0 <= first <= last < turns:
            raise UsageError(
                f"{file}: the specific query {pair['query']!r} has relevant_text_span [{first}, {last}] outside its "
                f"{turns} turns; pass --data with QMSum's unchanged meeting files."
            )
    return ranges


def read_specific_queries(folder: str | Path, limit: int | None = None) -> MeetingQueries:
    """The meetings of `folder` (named `split/file`; with `limit`, the first `limit`) and their specific queries."""
    files = meeting_files(folder)[:limit]
    names, documents, starts, queries, answers, relevant = [], [], [], [], [], []
    for index, file in enumerate(files):
        with reading_meeting(file, "a specific_query_list of {query, answer, relevant_text_span}"):
            meeting = json.loads(file.read_text(encoding="utf-8"))
            text, turns = transcript(meeting), turn_starts(meeting)
            specific = meeting["specific_query_list"]
            pairs = [(pair["query"], relevant_ranges(file, pair, len(turns))) for pair in specific]
        names.append(f"{file.parent.name}/{file.stem}")
        documents.append(text)
        starts.append(turns)
        for query, ranges in pairs:
            queries.append(query)
            answers.append(index)
            relevant.append(ranges)
    if not queries:
        raise UsageError(
            f"--data {folder} holds no specific queries (specific_query_list entries with relevant_text_span); pass "
            "--data with the folder of QMSum's train and val meetings (data/ALL of the QMSum repository)."
        )
    return MeetingQueries(names, documents, queries, answers, 0, starts, relevant)


@dataclass(frozen=True)
class Windows:
    """Every meeting's windows, meeting by meeting: each meeting's (a range of window indices), each window's text and
    turns (first, last), and each query's relevant windows."""

    of_meeting: list[range]
    texts: list[str]
    turns: list[tuple[int, int]]
    relevant: list[list[int]]


def cut_windows(
    task: MeetingQueries, tokenizer: PreTrainedTokenizerBase, documents: list[list[int]], window: int
) -> Windows:
    """The windows of W = `window` tokens of the meetings as the models read them (`documents`: their token ids,
    cut at --max-tokens); a query none of whose relevant turns is left in a window is refused."""
    offsets = tokenizer(task.documents, return_offsets_mapping=True, verbose=False)["offset_mapping"]
    of_meeting, texts, turns = [], [], []
    step = window - 2
    for meeting, text in enumerate(task.documents):
        body = offsets[meeting][1 : len(documents[meeting]) - 1]
        token_turns = np.searchsorted(task.turn_starts[meeting], [start for start, _ in body], side="right") - 1
        first_window = len(texts)
        for start in range(0, len(body), step):
            last = min(start + step, len(body)) - 1
            texts.append(text[body[start][0] : body[last][1]])
            turns.append((int(token_turns[start]), int(token_turns[last])))
        of_meeting.append(range(first_window, len(texts)))
    relevant = [
        [index for index in of_meeting[meeting] if any(a <= turns[index][1] and turns[index][0] <= b for a, b in spans)]
        for meeting, spans in zip(task.answers, task.relevant_turns, strict=True)
    ]
    lost = sum(not windows for windows in relevant)
    if lost:
        raise UsageError(
            f"--max-tokens cuts the meetings before every relevant turn of {lost} queries; give a larger "
            "--max-tokens, one that reads every meeting whole."
        )
    return Windows(of_meeting, texts, turns, relevant)
