"""`tisa-hf spans`: passages of WikiText articles find their article among all of them (`span_data.py`), the
development task on which the ways of reading long documents are chosen; QMSum is kept for evaluation.

It runs on the corpus runner as `tisa-hf qmsum` does (`corpus_task.py`: the same systems, measures, paired
intervals, resumable per document; files spans.json, spans.md, spans.png), and adds what this task is for: Acc@1
and nDCG@10 by where the passage starts in its article, in tokens of the models' tokenizer (words where BM25 is the
only system). A reader cut at 512 tokens can only find the passages of the first bucket by their own text; a
whole-document reader can find all.
"""

from __future__ import annotations

import argparse
import sys

from transformers import PreTrainedTokenizerBase

from ...common.hub_access import wikitext_file
from ..options import spans_parser
from .corpus_task import CorpusKind, CorpusRetrieval, add_groups, print_summary
from .query_groups import by_group
from .span_data import SpanTask, read_span_task

SPANS = CorpusKind("spans", "WikiText passages", "articles", {})
DEPTH_GROUPS = (0, 512, 2048, 8192)  # where the passage starts, in tokens: [0, 512), [512, 2048), ...


def passage_depths(task: SpanTask, tokenizer: PreTrainedTokenizerBase | None) -> tuple[list[int], str]:
    """Where each passage starts in its article: tokens of the models' tokenizer before it ([CLS] counted), or
    words where no system has a tokenizer."""
    if tokenizer is None:
        return task.depths, "words"
    prefixes = [
        " ".join(task.documents[answer].split()[:depth])
        for answer, depth in zip(task.answers, task.depths, strict=True)
    ]
    counts = tokenizer(prefixes, add_special_tokens=False, verbose=False)["input_ids"]
    return [len(ids) + 1 for ids in counts], "tokens"


def main(argv: list[str] | None = None) -> int:
    args: argparse.Namespace = spans_parser().parse_args(sys.argv[1:] if argv is None else argv)
    args.data = args.data or str(wikitext_file("test", "--data"))
    task = read_span_task(args.data, args.spans_per_article, args.span_words, args.seed, args.articles)
    evaluation = CorpusRetrieval(SPANS, task, args)
    record = evaluation()
    depths, unit = passage_depths(task, evaluation.tokenizer)
    groups = by_group(record, depths, DEPTH_GROUPS, unit)
    add_groups(record, SPANS, evaluation.out, "by_depth", groups, "where the passage starts in its article")
    print_summary(record)
    return 0
