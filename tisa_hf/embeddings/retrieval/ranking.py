"""Ranking measures, with one relevant candidate per query or several, reciprocal-rank fusion, and late-interaction
scores.

A query's rank is that of its document among all candidates, ties counted against it (rank 1 only when it
scores strictly above every other candidate, as Acc@1 always was here). With one relevant document, nDCG@10 is
1 / log2(rank + 1) when rank <= 10, else 0 (the ideal DCG is 1); MRR@10 is 1 / rank when rank <= 10.

With several relevant candidates (binary relevance: each relevant one gains 1), a query's ranking orders its
candidates by score, a relevant one after every other of the same score (ties against the query again), and keeps
the positions of its relevant ones down to the deepest cutoff: nDCG@10 is their DCG, the sum of 1 / log2(position
+ 1) over the first 10, over the ideal DCG of min(R, 10) relevant ones first (R: the query's relevant candidates);
Recall@k is the share of the R found in the first k (pytrec_eval's and BEIR's recall, so below 1 where R > k).

Reciprocal-rank fusion (Cormack et al., 2009) scores a document by the sum over the fused systems of
1 / (k + its rank), k = 60 as in the paper and in practice; tied documents share their best rank. Convex fusion
(Bruch et al., 2023, "An analysis of fusion functions for hybrid retrieval", who find it ahead of reciprocal-rank
fusion once its weight is tuned) scores a document by W times a model system's score plus 1 - W times a BM25
system's, each min-max normalised over the query's candidates (its finite scores) so that both run from 0 to 1.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any, Protocol

import numpy as np
import torch
from scipy import stats

CUTOFF = 10
RRF_K = 60
MAXSIM_BLOCK_PRODUCTS = 2**25  # query-token x document-token products a block: 128 MB of float32


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


class Judge(Protocol):
    """How a task measures a cell's scores (queries x candidates): the measures' labels by key, a system's result
    (each measure's mean over the queries and what it keeps per query), and a measure's per-query values from a
    result (the paired intervals resample them)."""

    labels: dict[str, str]

    def result(self, scores: np.ndarray) -> dict[str, Any]: ...

    def per_query(self, result: dict[str, Any], measure: str) -> list[float]: ...


class OneRelevant:
    """Each query's one relevant document (`answers[q]`): its rank gives nDCG@10, Acc@1 and MRR@10, and a result
    keeps the ranks."""

    labels = MEASURE_LABELS

    def __init__(self, answers: Sequence[int]) -> None:
        self.answers = answers

    def result(self, scores: np.ndarray) -> dict[str, Any]:
        ranks = answer_ranks(scores, self.answers)
        return {measure: float(np.mean(per_query(measure, ranks))) for measure in MEASURES} | {"ranks": ranks}

    def per_query(self, result: dict[str, Any], measure: str) -> list[float]:
        return per_query(measure, result["ranks"])


RECALL_CUTOFFS = (10, 50)
SEVERAL_LABELS = {"ndcg_at_10": "nDCG@10", **{f"recall_at_{k}": f"Recall@{k}" for k in RECALL_CUTOFFS}}


def relevant_positions(scores: np.ndarray, relevant: Sequence[Sequence[int]], deepest: int) -> list[list[int]]:
    """Per query (a row of `scores`), the positions (from 1) of its relevant candidates among its first `deepest`,
    a relevant candidate ranked after every other candidate of its score."""
    positions = []
    for row, wanted in zip(np.asarray(scores), relevant, strict=True):
        is_relevant = np.zeros(len(row), dtype=bool)
        is_relevant[list(wanted)] = True
        order = np.lexsort((is_relevant, -row))[:deepest]
        positions.append((np.flatnonzero(is_relevant[order]) + 1).tolist())
    return positions


def ndcg_of(positions: Sequence[int], relevant: int, cutoff: int = CUTOFF) -> float:
    gained = sum(1 / math.log2(position + 1) for position in positions if position <= cutoff)
    return gained / sum(1 / math.log2(position + 1) for position in range(1, min(relevant, cutoff) + 1))


def recall_of(positions: Sequence[int], relevant: int, cutoff: int) -> float:
    return sum(position <= cutoff for position in positions) / relevant


class SeveralRelevant:
    """Each query's relevant candidates (`relevant[q]`, binary relevance): nDCG@10, Recall@10 and Recall@50, and a
    result keeps each query's relevant positions down to 50 (`relevant_positions`)."""

    labels = SEVERAL_LABELS

    def __init__(self, relevant: Sequence[Sequence[int]]) -> None:
        if min(map(len, relevant)) == 0:
            raise ValueError("several relevant: a query has no relevant candidate; every query needs one.")
        self.relevant = relevant

    def result(self, scores: np.ndarray) -> dict[str, Any]:
        positions = relevant_positions(scores, self.relevant, max(RECALL_CUTOFFS))
        result: dict[str, Any] = {"relevant_positions": positions}
        return {measure: float(np.mean(self.per_query(result, measure))) for measure in self.labels} | result

    def per_query(self, result: dict[str, Any], measure: str) -> list[float]:
        pairs = list(zip(result["relevant_positions"], map(len, self.relevant), strict=True))
        if measure == "ndcg_at_10":
            return [ndcg_of(positions, count) for positions, count in pairs]
        cutoff = int(measure.removeprefix("recall_at_"))
        return [recall_of(positions, count, cutoff) for positions, count in pairs]


def reciprocal_rank_fusion(*scores: np.ndarray, k: int = RRF_K) -> np.ndarray:
    """The fused scores (queries x documents) of several systems' score matrices over the same documents."""
    fused = np.zeros(np.shape(scores[0]))
    for matrix in scores:
        fused += 1 / (k + stats.rankdata(-np.asarray(matrix, dtype=float), method="min", axis=-1))
    return fused


def min_max(scores: np.ndarray) -> np.ndarray:
    """Each row of `scores` (queries x documents) mapped linearly onto 0 (its lowest finite score) to 1 (its
    highest); a row of one value becomes 0, and -inf (a document that is no candidate of the query) stays."""
    finite = np.isfinite(scores)
    low = np.where(finite, scores, np.inf).min(axis=1, keepdims=True)
    high = np.where(finite, scores, -np.inf).max(axis=1, keepdims=True)
    spread = np.where(high > low, high - low, 1.0)
    return np.where(finite, (scores - np.where(finite, low, 0)) / spread, -np.inf)


def convex_fusion(lexical: np.ndarray, dense: np.ndarray, weight: float) -> np.ndarray:
    """The fused scores (queries x documents): `weight` times the dense system's min-max normalised scores plus
    1 - `weight` times the lexical system's; -inf where either is (no candidate of the query), at any weight."""
    normalised = [min_max(np.asarray(scores, dtype=float)) for scores in (lexical, dense)]
    candidate = np.isfinite(normalised[0]) & np.isfinite(normalised[1])
    fused = weight * np.where(candidate, normalised[1], 0) + (1 - weight) * np.where(candidate, normalised[0], 0)
    return np.where(candidate, fused, -np.inf)


CONVEX_WEIGHTS = tuple(round(0.05 * step, 2) for step in range(21))


def convex_weight_grid(lexical: np.ndarray, dense: np.ndarray, answers: Sequence[int]) -> dict[float, float]:
    """nDCG@10 (one relevant document a query, `answers`) of convex fusion at each weight from 0 to 1 by 0.05:
    what a weight is chosen from, on a development task."""
    return {
        weight: float(
            np.mean([ndcg_at_10(rank) for rank in answer_ranks(convex_fusion(lexical, dense, weight), answers)])
        )
        for weight in CONVEX_WEIGHTS
    }


def chosen_weight(grid: dict[float, float]) -> float:
    """The weight of the best nDCG@10, the smallest among ties (the nearest to BM25 alone)."""
    best = max(grid.values())
    return min(weight for weight, value in grid.items() if value == best)


class LateInteraction:
    """Late interaction (ColBERT's MaxSim) of fixed queries, each given as its token vectors, against one document
    at a time: a document scores, for each query, the mean over the query's tokens of each one's best cosine
    similarity to one of the document's token vectors. Written here rather than calling sentence-transformers'
    `util.mean_maxsim`, which it equals to 6e-8: at QMSum's sizes it is twice as fast on the CPU
    (`scripts/bench_maxsim.py`), multiplying blocks of query tokens with the whole document where the library pads
    every query to the longest. `multivector/` gives the same scores as a `MultiVectorEncoder`'s `similarity`.

    One document at a time, so that a run keeps a document's scores (one number a query) rather than its token
    vectors (gigabytes over a corpus) and resumes anywhere: the products run as blocks of query tokens against the
    whole document, large matrix products (about 10^14 multiply-adds for QMSum: half an hour on 2 CPU cores,
    seconds on a GPU). With a `device` they run there in torch (vectors already there are not copied), else in
    numpy (faster than torch on the CPU); vectors come as arrays or tensors."""

    def __init__(self, queries: Sequence[np.ndarray | torch.Tensor], device: torch.device | None = None) -> None:
        if min(map(len, queries)) == 0:
            raise ValueError("late interaction: a query has no token vectors (an empty text); give it some words.")
        self.device = device
        self.rows: np.ndarray | torch.Tensor = (
            np.concatenate([np.asarray(query) for query in queries])
            if device is None
            else torch.cat([torch.as_tensor(query, device=device) for query in queries])
        )
        self.starts = np.cumsum([0, *map(len, queries[:-1])])
        self.counts = np.array([len(query) for query in queries])

    def __call__(self, document: np.ndarray | torch.Tensor) -> np.ndarray:
        """(queries,): each query's MaxSim score against the document's (tokens, dim) vectors."""
        if len(document) == 0:
            raise ValueError("late interaction: a document has no token vectors (an empty text); give it some words.")
        step = max(1, MAXSIM_BLOCK_PRODUCTS // len(document))
        blocks = range(0, len(self.rows), step)
        if self.device is None:
            columns = np.asarray(document).T
            best = np.concatenate([(self.rows[start : start + step] @ columns).max(1) for start in blocks])
        else:
            on = torch.as_tensor(document, device=self.device).T
            best = torch.cat([(self.rows[start : start + step] @ on).amax(1) for start in blocks]).cpu().numpy()
        return np.add.reduceat(best, self.starts) / self.counts
