"""`tisa-hf qmsum-passages`: QMSum's query-based passage retrieval (`passage_data.py`) on the corpus runner
(`corpus_task.py`): does reading the whole meeting help find the passage a question is about?

Each specific query ranks the windows of W tokens (--window-tokens) in two cells: `within` its own meeting's windows
only, and `across` the windows of every meeting. Its relevant windows are those holding its relevant turns, measured
by nDCG@10 and Recall@10/@50 (binary relevance, `ranking.SeveralRelevant`), with paired intervals over the queries.

A model system keeps a window as one vector (`chunk:MODEL` and whole-read systems) or as its token vectors scored by
MaxSim (`late:`): `chunk:MODEL` reads each window apart; a whole-read system (a replace-mode model,
`tisa:replace:S:MODEL`, `interp:MODEL`) reads each meeting whole and pools each window from its token states (late
chunking), so that the two differ only in whether a window was read in context (`readouts.py`). The `max:` read-out
is not taken (a window is one vector already), nor `trunc:` (a window read apart is `chunk:`'s). BM25 reads the
windows' text, one index over all of them, so its idf counts every meeting's windows in both cells; a hybrid fuses
the ranks among a query's own candidates. A run is one W: OUT/qmsum-passages.json, .md and .png, resumable as the
runner's are.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

import numpy as np
from transformers import PreTrainedTokenizerBase

from ...common.spellings import INTERP
from ...errors import UsageError
from ..options import QMSUM_PASSAGES, READINGS_TAKEN, passages_parser
from ..systems import SystemSpec, check_readouts, parse_system
from .corpus_task import CellsOf, Corpus, CorpusKind, CorpusRetrieval, JudgedCell, TaskCells
from .passage_data import MeetingQueries, cut_windows, read_specific_queries
from .ranking import SeveralRelevant
from .scoring import Cell

PASSAGES = CorpusKind("qmsum-passages", "QMSum passages", "meetings", {})
ACROSS, WITHIN = "across", "within"


def passage_cells(task: MeetingQueries, window: int) -> CellsOf:
    """The task's two cells at windows of `window` tokens, and their counts for the record's settings (the runner
    gives the task's corpus and the tokenizer it always loads for this task)."""

    def cells(
        corpus: Corpus,
        tokenizer: PreTrainedTokenizerBase | None,
        documents: list[list[int]],
        query_ids: list[list[int]],
    ) -> TaskCells:
        windows = cut_windows(task, tokenizer, documents, window)
        judge = SeveralRelevant(windows.relevant)
        own = [windows.of_meeting[meeting] for meeting in task.answers]
        across, within = (
            Cell(name, documents, query_ids, task.queries, lambda: windows.texts, window=window, candidates=candidates)
            for name, candidates in ((ACROSS, None), (WITHIN, own))
        )
        relevant = [len(indices) for indices in windows.relevant]
        per_meeting = [len(indices) for indices in windows.of_meeting]
        settings = {
            "window_length": window,  # in tokens; a key without "tokens" is compared when a run resumes
            "windows": len(windows.texts),
            "windows_per_meeting": spread(per_meeting),
            "relevant_windows": spread(relevant),
            "relevant_windows_per_query": relevant,
        }
        return TaskCells([JudgedCell(across, judge), JudgedCell(within, judge)], settings)

    return cells


def spread(counts: list[int]) -> dict[str, float]:
    return {"mean": float(np.mean(counts)), "median": float(np.median(counts)), "min": min(counts), "max": max(counts)}


def check_systems(specs: list[str], window: int, command: str = QMSUM_PASSAGES) -> None:
    """The read-outs and readings a task of windows (`command`) takes, and a window no longer than what a system
    reads it apart with."""
    if window < 3:
        raise UsageError(
            f"--window-tokens {window}: a window needs 3 tokens at least (its [CLS], one of the meeting's, its [SEP])."
        )
    models = [system for system in map(parse_system, specs) if isinstance(system, SystemSpec)]
    check_readouts(models, command)
    for system in models:
        if system.reading not in READINGS_TAKEN[command]:  # trunc:
            model = system.spelling.model
            raise UsageError(f"{system.spec}: a window read apart is chunk:'s reading; write chunk:{model}.")
        if not system.reading.one_pass and window > system.table_length:
            raise UsageError(
                f"{system.spec} reads each window apart, and a window of {window} tokens is longer than its position "
                f"table ({system.table_length}); give --window-tokens up to {system.table_length}, or read each "
                f"document whole: {system.spelling.read_as(INTERP)} or a replace-mode model."
            )


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Measures every pending system at --window-tokens (checked before any model loads) and returns the record."""
    check_systems(args.systems, args.window_tokens)
    task = read_specific_queries(args.data, args.meetings)
    return CorpusRetrieval(PASSAGES, task, args, passage_cells(task, args.window_tokens), args.tokenizer)()


def print_cells(record: dict[str, Any]) -> None:
    """Each system's measures in both cells, a line a system."""
    for name, result in record["results"].items():
        measures = [
            f"{cell} " + ", ".join(f"{100 * result[cell][key]:.1f}" for key in SeveralRelevant.labels)
            for cell in (ACROSS, WITHIN)
        ]
        print(f"{name}: nDCG@10, Recall@10, Recall@50 {'; '.join(measures)}")


def main(argv: list[str] | None = None) -> int:
    print_cells(run(passages_parser().parse_args(sys.argv[1:] if argv is None else argv)))
    return 0
