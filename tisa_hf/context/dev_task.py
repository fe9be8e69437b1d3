"""`tisa-hf context-passages`: windows of WikiText articles whose article is named only outside them (`dev_data.py`)
on the corpus runner (`embeddings/retrieval/corpus_task.py`), the development task on which training that rewards
context is chosen (`tisa-hf context-train`); QMSum is kept for evaluation.

It is `tisa-hf qmsum-passages`' task on other text: each query ranks the windows of W tokens in two cells, `within`
its own article and `across` every article's, its one relevant window measured by nDCG@10 and Recall@10/@50 with
paired intervals over the queries; the same systems (`chunk:MODEL` reads each window apart, a whole-read system
pools each from the whole article's read, `late:` keeps their token vectors; BM25 over the windows' text; the
hybrids) and the same files: OUT/context-passages.json, .md and .png, resumable as the runner's are.
"""

from __future__ import annotations

import argparse
import sys
from typing import Any

from transformers import PreTrainedTokenizerBase

from ..common.hub_access import wikitext_file
from ..embeddings.options import CONTEXT_PASSAGES, context_passages_parser
from ..embeddings.retrieval.corpus_task import CellsOf, Corpus, CorpusKind, CorpusRetrieval, JudgedCell, TaskCells
from ..embeddings.retrieval.passages import ACROSS, WITHIN, check_systems, print_cells, spread
from ..embeddings.retrieval.ranking import SeveralRelevant
from ..embeddings.retrieval.scoring import Cell
from ..embeddings.systems import SystemSpec, load_tokenizer
from .articles import read_titled_articles
from .dev_data import ContextPassages, build_context_passages

KIND = CorpusKind("context-passages", "WikiText passages named outside their window", "articles", {})


def context_cells(task: ContextPassages, window: int, query_words: int, seed: int) -> CellsOf:
    """The task's two cells, and its counts for the record's settings."""

    def cells(
        corpus: Corpus,
        tokenizer: PreTrainedTokenizerBase | None,
        documents: list[list[int]],
        query_ids: list[list[int]],
    ) -> TaskCells:
        judge = SeveralRelevant(task.relevant)
        own = [task.of_article[article] for article in task.answers]
        across, within = (
            Cell(name, documents, query_ids, task.queries, lambda: task.window_texts, window=window, candidates=rows)
            for name, rows in ((ACROSS, None), (WITHIN, own))
        )
        settings = {
            "window_length": window,  # in tokens; a key without "tokens" is compared when a run resumes
            "windows": len(task.window_texts),
            "windows_per_article": spread([len(indices) for indices in task.of_article]),
            "query_words": query_words,
            "seed": seed,
        }
        return TaskCells([JudgedCell(across, judge), JudgedCell(within, judge)], settings)

    return cells


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Measures every pending system (checked, and the task built, before any model loads); returns the record."""
    check_systems(args.systems, args.window_tokens, CONTEXT_PASSAGES)
    args.data = args.data or str(wikitext_file("test", "--data"))
    articles = read_titled_articles(args.data, args.articles)
    tokenizer = load_tokenizer(SystemSpec.parse(args.tokenizer))
    task = build_context_passages(articles, tokenizer, args.window_tokens, args.max_tokens, args.query_words, args.seed)
    cells = context_cells(task, args.window_tokens, args.query_words, args.seed)
    return CorpusRetrieval(KIND, task, args, cells, args.tokenizer)()


def main(argv: list[str] | None = None) -> int:
    print_cells(run(context_passages_parser().parse_args(sys.argv[1:] if argv is None else argv)))
    return 0
