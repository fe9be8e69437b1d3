"""The read-outs' scorers, one class each (`common/spellings.py` registers the read-outs and their grammar): what a
retrieval run keeps of each document, and how what it kept scores against the run's queries, as
sentence-transformers' `SimilarityFunction` names a score function. A run keeps a document's rows as soon as it is
read (`kept_embeddings.py`), so that an interrupted run resumes at the next document; the scores are queries x
documents, higher better.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np
import torch
import torch.nn.functional as F

from ...common.spellings import LATE, MAX, MEAN, Readout
from ..systems import Embedder
from .ranking import LateInteraction


class Scorer(ABC):
    """A read-out of one loaded system against a run's queries (token ids). `torch_products`: the query-document
    products of a one-vector read-out run in torch rather than numpy (`tisa-hf longembed`'s cells); the two round
    the last bit differently, and each command keeps its own so that its kept scores stay reproducible."""

    readout: ClassVar[Readout]

    def __init__(self, embedder: Embedder, query_ids: list[list[int]], torch_products: bool = False) -> None:
        self.embedder = embedder
        self.torch_products = torch_products

    @abstractmethod
    def keep(self, document: list[int]) -> np.ndarray:
        """What a run keeps of a document: (rows, width)."""

    def keep_all(self, documents: list[list[int]], progress: str | None = None) -> tuple[np.ndarray, list[int]]:
        """What `keep` keeps of every document, stacked, and each document's row count."""
        kept = [self.keep(document) for document in documents]
        return np.concatenate(kept), [len(rows) for rows in kept]

    @abstractmethod
    def scores(self, kept: np.ndarray, counts: list[int]) -> np.ndarray:
        """(queries, documents) from the documents' kept rows, `counts[d]` rows for document d."""

    def vectors_per_document(self, documents: list[list[int]], counts: list[int]) -> float | None:
        """The mean number of vectors a document is kept as, for a read-out of several (None: one)."""
        return None


class MeanScorer(Scorer):
    """One vector a text (`Embedder.read`): a document scores its cosine with the query."""

    readout = MEAN

    def __init__(self, embedder: Embedder, query_ids: list[list[int]], torch_products: bool = False) -> None:
        super().__init__(embedder, query_ids, torch_products)
        self.queries = embedder.read(query_ids)

    def keep(self, document: list[int]) -> np.ndarray:
        return self.embedder.read([document]).numpy()

    def keep_all(self, documents: list[list[int]], progress: str | None = None) -> tuple[np.ndarray, list[int]]:
        return self.embedder.read(documents, progress).numpy(), [1] * len(documents)

    def scores(self, kept: np.ndarray, counts: list[int]) -> np.ndarray:
        if self.torch_products:
            return (self.queries @ torch.from_numpy(kept).T).numpy()
        return self.queries.numpy() @ kept.T


class MaxScorer(Scorer):
    """One vector per window of T - 2 tokens (T: the position table), at the chunks' boundaries: the chunks' own
    embeddings where the reading reads them apart (`chunk:`), else the mean of the whole document's token states
    over each window, so that the two differ only in whether a window was read in context. A document scores its
    best window's cosine with the query (one vector)."""

    readout = MAX

    def __init__(self, embedder: Embedder, query_ids: list[list[int]], torch_products: bool = False) -> None:
        super().__init__(embedder, query_ids, torch_products)
        self.queries = embedder.read(query_ids).numpy()

    @torch.no_grad()
    def keep(self, document: list[int]) -> np.ndarray:
        if not self.embedder.spec.reading.one_pass:
            return self.embedder.embed(self.embedder.pieces(document)).numpy()
        body, step = self.embedder.token_states(document)[1:-1], self.embedder.spec.table_length - 2
        windows = torch.stack([body[start : start + step].mean(0) for start in range(0, len(body), step)])
        return F.normalize(windows, dim=-1).cpu().numpy()

    def scores(self, kept: np.ndarray, counts: list[int]) -> np.ndarray:
        starts = np.cumsum([0, *counts[:-1]])
        return np.maximum.reduceat(self.queries @ kept.T, starts, axis=1)

    def vectors_per_document(self, documents: list[list[int]], counts: list[int]) -> float | None:
        return float(np.mean(counts))


class LateScorer(Scorer):
    """One vector a token as the reading gives them (`Embedder.read_tokens`), scored by late interaction (ColBERT's
    MaxSim, `ranking.LateInteraction`) as soon as the document is read: a run keeps a document's scores, one a
    query, not its token vectors. The products run on the model's device, where the token states already are."""

    readout = LATE

    def __init__(self, embedder: Embedder, query_ids: list[list[int]], torch_products: bool = False) -> None:
        super().__init__(embedder, query_ids, torch_products)
        device = embedder.model.device
        queries = [embedder.read_tokens(query) for query in query_ids]
        self.late = LateInteraction(queries, None if device.type == "cpu" else device)

    def keep(self, document: list[int]) -> np.ndarray:
        return self.late(self.embedder.read_tokens(document))[None]

    def scores(self, kept: np.ndarray, counts: list[int]) -> np.ndarray:
        return kept.T

    def vectors_per_document(self, documents: list[list[int]], counts: list[int]) -> float | None:
        return float(np.mean([sum(len(piece) - 2 for piece in self.embedder.pieces(d)) for d in documents]))


SCORERS: dict[str, type[Scorer]] = {scorer.readout.name: scorer for scorer in (MeanScorer, MaxScorer, LateScorer)}


def scorer_for(embedder: Embedder, query_ids: list[list[int]], torch_products: bool = False) -> Scorer:
    """The scorer of the loaded system's read-out, its queries read."""
    return SCORERS[embedder.spec.readout.name](embedder, query_ids, torch_products)
