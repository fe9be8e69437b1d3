"""`tisa-hf spans`: passages of WikiText articles find their article among all of them (`span_data.py`), the
development task on which the ways of reading long documents are chosen; QMSum is kept for evaluation.

It runs as `tisa-hf qmsum` does (the same systems, measures, paired intervals, resumable per document; files
spans.json, spans.md, spans.png), and adds what this task is for: Acc@1 and nDCG@10 by where the passage starts
in its article, in tokens of the models' tokenizer (words where BM25 is the only system). A reader cut at 512
tokens can only find the passages of the first bucket by their own text; a whole-document reader can find all.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from ..common.result_files import write_record
from .qmsum import CorpusKind, run
from .query_groups import by_group, group_tables
from .span_data import SpanTask, read_span_task
from .systems import dense_systems, parse_system, shared_tokenizer

SPANS = CorpusKind("spans", "WikiText passages", "articles", {})
DEPTH_GROUPS = (0, 512, 2048, 8192)  # where the passage starts, in tokens: [0, 512), [512, 2048), ...


def passage_depths(task: SpanTask, systems: list[str]) -> tuple[list[int], str]:
    """Where each passage starts in its article: tokens of the models' tokenizer before it ([CLS] counted), or
    words where no system has a tokenizer."""
    models = dense_systems([parse_system(spec) for spec in systems])
    if not models:
        return task.depths, "words"
    tokenizer = shared_tokenizer(models)
    prefixes = [
        " ".join(task.documents[answer].split()[:depth])
        for answer, depth in zip(task.answers, task.depths, strict=True)
    ]
    counts = tokenizer(prefixes, add_special_tokens=False, verbose=False)["input_ids"]
    return [len(ids) + 1 for ids in counts], "tokens"


def main(argv: list[str] | None = None) -> int:
    from .options import spans_parser

    args: argparse.Namespace = spans_parser().parse_args(sys.argv[1:] if argv is None else argv)
    task = read_span_task(args.data, args.spans_per_article, args.span_words, args.seed, args.articles)
    args.meetings = None  # the corpus is given, not read from QMSum's folder
    record = run(args, SPANS, task)
    depths, unit = passage_depths(task, args.systems)
    record["by_depth"] = by_group(record, depths, DEPTH_GROUPS, unit)
    out = Path(args.out)
    write_record(record, out / SPANS.results_file)
    with (out / SPANS.tables_file).open("a") as tables:
        tables.write("\n" + group_tables(record["by_depth"], "where the passage starts in its article"))
    for name, result in record["results"].items():
        print(f"{name}: nDCG@10 {100 * result['ndcg_at_10']:.1f}, Acc@1 {100 * result['acc_at_1']:.1f}")
    return 0
