"""Ranking measures with one relevant document per query, reciprocal-rank fusion, and late-interaction scores.

A query's rank is that of its document among all candidates, ties counted against it (rank 1 only when it
scores strictly above every other candidate, as Acc@1 always was here). With one relevant document, nDCG@10 is
1 / log2(rank + 1) when rank <= 10, else 0 (the ideal DCG is 1); MRR@10 is 1 / rank when rank <= 10.

Reciprocal-rank fusion (Cormack et al., 2009) scores a document by the sum over the fused systems of
1 / (k + its rank), k = 60 as in the paper and in practice; tied documents share their best rank.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np
import torch
from scipy import stats

CUTOFF = 10
RRF_K = 60


def answer_ranks(scores: np.ndarray, answers: Sequence[int]) -> list[int]:
    """Per query (a row of `scores`, one column per document), the rank of its document `answers[q]`: one plus
    the number of other documents scoring at least as high."""
    scores = np.asarray(scores)
    right = scores[np.arange(len(answers)), np.asarray(answers)][:, None]
    return ((scores >= right).sum(-1)).astype(int).tolist()  # the document itself is counted once: rank >= 1


def acc_at_1(rank: int) -> float:
    return float(rank == 1)


def ndcg_at_10(rank: int) -> float:
    return 1 / math.log2(rank + 1) if rank <= CUTOFF else 0.0


def mrr_at_10(rank: int) -> float:
    return 1 / rank if rank <= CUTOFF else 0.0


MEASURES: dict[str, Callable[[int], float]] = {"ndcg_at_10": ndcg_at_10, "acc_at_1": acc_at_1, "mrr_at_10": mrr_at_10}
MEASURE_LABELS = {"ndcg_at_10": "nDCG@10", "acc_at_1": "Acc@1", "mrr_at_10": "MRR@10"}


def per_query(measure: str, ranks: Sequence[int]) -> list[float]:
    return [MEASURES[measure](rank) for rank in ranks]


def reciprocal_rank_fusion(*scores: np.ndarray, k: int = RRF_K) -> np.ndarray:
    """The fused scores (queries x documents) of several systems' score matrices over the same documents."""
    fused = np.zeros(np.shape(scores[0]))
    for matrix in scores:
        fused += 1 / (k + stats.rankdata(-np.asarray(matrix, dtype=float), method="min", axis=-1))
    return fused


def late_interaction_scores(
    queries: list[np.ndarray], rows: np.ndarray, counts: list[int], device: torch.device | None = None
) -> np.ndarray:
    """(queries, documents): late interaction (ColBERT's MaxSim), the mean over a query's token vectors of each
    one's best cosine similarity to the token vectors of a document (`counts[d]` consecutive rows of `rows`).
    Written here: PyLate, the library of late interaction, pins sentence-transformers 5.3 and transformers <= 5.3.

    With a `device` the products and maxima run there in torch: on a GPU QMSum's MaxSim (about 10^14
    multiply-adds) takes seconds, against hours on 2 CPU cores."""
    if device is None:
        starts = np.cumsum([0, *counts[:-1]])
        return np.stack([np.maximum.reduceat(query @ rows.T, starts, axis=1).mean(0) for query in queries])
    table = torch.from_numpy(rows).to(device)
    owner = torch.repeat_interleave(torch.arange(len(counts), device=device), torch.tensor(counts, device=device))
    scores = []
    for query in queries:
        similarity = torch.from_numpy(query).to(device) @ table.T
        best = similarity.new_full((len(query), len(counts)), -math.inf)
        best.scatter_reduce_(1, owner.expand_as(similarity), similarity, reduce="amax")
        scores.append(best.mean(0))
    return torch.stack(scores).cpu().numpy()
