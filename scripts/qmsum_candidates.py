"""BM25 candidates re-ranked by late interaction on QMSum, from the committed scores of `tisa-hf qmsum`: no model
runs.

For each query, BM25's N best meetings (BM25's order, the earlier meeting first among ties) are ranked by a `late:`
system's MaxSim scores and placed above every other meeting, which keep BM25's order: what `tisa-hf search
--candidates N` returns. Printed per N: the recall of the candidates (the query's meeting among them) and nDCG@10
(the query's rank as the retrieval commands count it, ties against it), beside BM25 and the exact `late:` system.

    python scripts/qmsum_candidates.py
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np

from tisa_hf.common.result_files import scores_path
from tisa_hf.embeddings.retrieval.qmsum_data import read_meetings
from tisa_hf.embeddings.retrieval.ranking import answer_ranks, ndcg_at_10

RECORDS = Path(__file__).resolve().parents[1] / "docs/results/longdoc/qmsum-minilm"
SYSTEMS = ("late:runs/adapt-minilm/s5-all", "late:chunk:minilm")


def ndcg(scores: np.ndarray, answers: list[int]) -> float:
    return 100 * float(np.mean([ndcg_at_10(rank) for rank in answer_ranks(scores, answers)]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data", default="../shared/longdoc/qmsum")
    parser.add_argument("--candidates", type=int, nargs="+", default=[3, 5, 10, 20, 50])
    args = parser.parse_args()
    answers = read_meetings(args.data).answers
    bm25 = np.load(scores_path(RECORDS, "bm25", "qmsum"))
    order = np.argsort(-bm25, axis=1, kind="stable")
    rows = np.arange(len(bm25))[:, None]
    print(f"bm25: nDCG@10 {ndcg(bm25, answers):.1f}")
    for system in SYSTEMS:
        late = np.load(scores_path(RECORDS, system, "qmsum"))
        print(f"{system}: exact nDCG@10 {ndcg(late, answers):.1f}")
        for count in args.candidates:
            candidates = order[:, :count]
            # BM25's ranks below every candidate; the candidates by late interaction above them all
            reranked = -np.argsort(order, axis=1).astype(float) - 10.0
            reranked[rows, candidates] = late[rows, candidates]
            recall = 100 * np.mean([answer in row for answer, row in zip(answers, candidates, strict=True)])
            print(f"  BM25 top {count}: recall {recall:.1f}, nDCG@10 {ndcg(reranked, answers):.1f}")


if __name__ == "__main__":
    main()
