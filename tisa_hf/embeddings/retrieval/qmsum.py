"""`tisa-hf qmsum`: LongEmbed's QMSum retrieval, real meetings of 1.5k-37k tokens (`qmsum_data.py`), on the corpus
runner (`corpus_task.py`).

Every system scores the 1,527 summaries against the 197 meeting transcripts; per query, the rank of its meeting
gives nDCG@10 (LongEmbed's score), Acc@1 and MRR@10. A model reads a document cut at --max-tokens (default 32,768:
of the packaged MiniLM's tokens it cuts one meeting of 36,718). A model system's document embeddings are the cost
(hours for a TISA model on 2 CPU cores; a `late:` system keeps each document's MaxSim scores, one a query, not its
token vectors). Besides the runner's record, tables and plot (nDCG@10 beside LongEmbed's published numbers),
OUT/qmsum.md ends with Acc@1 and nDCG@10 by the length of the query's meeting (`by_length` in OUT/qmsum.json).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

from ..options import qmsum_parser
from .corpus_task import CorpusKind, CorpusRetrieval, add_groups, print_summary
from .qmsum_data import read_meetings
from .query_groups import by_group

# nDCG@10 x100 on LongEmbed's QMSum task (LongEmbed repository, results/*/LEMBQMSumRetrieval.json)
PUBLISHED_NDCG_AT_10 = {
    "e5-base-v2 (512)": 23.8,
    "E5-Base-4k": 35.6,
    "bge-m3 (8k)": 35.5,
    "nomic-embed-text-v1": 36.7,
    "jina-embeddings-v2-base-en (8k)": 38.9,
    "E5-Mistral-7B": 43.6,
}
QMSUM = CorpusKind("qmsum", "QMSum", "meetings", PUBLISHED_NDCG_AT_10, "LongEmbed's QMSum")
LENGTH_GROUPS = (0, 8192, 16384)  # the query's meeting, in tokens: [0, 8192), [8192, 16384), 16384+


def run(args: argparse.Namespace) -> dict[str, Any]:
    """Measures every pending system on QMSum's meetings (--data; the first --meetings) and returns the record."""
    return CorpusRetrieval(QMSUM, read_meetings(args.data, args.meetings), args)()


def main(argv: list[str] | None = None) -> int:
    args = qmsum_parser().parse_args(sys.argv[1:] if argv is None else argv)
    record = run(args)
    lengths = record["settings"].get("document_tokens", {}).get("per_query")
    if lengths:  # counted where a model is among the systems
        groups = by_group(record, lengths, LENGTH_GROUPS, "tokens")
        add_groups(record, QMSUM, Path(args.out), "by_length", groups, "the length of the query's meeting")
    print_summary(record)
    return 0
