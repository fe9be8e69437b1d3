"""The read-outs' scorers, one class each (`common/spellings.py` registers the read-outs and their grammar): what a
retrieval run keeps of each document, and how what it kept scores against the run's queries, as
sentence-transformers' `SimilarityFunction` names a score function. A run keeps a document's rows as soon as it is
read (`kept_embeddings.py`), so that an interrupted run resumes at the next document; the scores are queries x
candidates, higher better.

A candidate is a document, or, where a run cuts the documents into windows of W tokens (`window`), each window:
W - 2 of the document's tokens in order, W with the [CLS] and [SEP] it is read apart between, the last one shorter.
A reading that reads pieces apart (`chunk:`) reads each window apart; a whole read gives each window the document's
token states over it (late chunking: Günther et al., 2024), so that the two differ only in whether a window was read
in context. The mean read-out keeps one vector a window, the late read-out each window's MaxSim scores.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import ClassVar

import numpy as np
import torch

from ...common.long_inputs import window_means
from ...common.spellings import LATE, MAX, MEAN, Readout
from ..systems import Embedder
from .ranking import LateInteraction


class Scorer(ABC):
    """A read-out of one loaded system against a run's queries (token ids). `torch_products`: the query-document
    products of a one-vector read-out run in torch rather than numpy (`tisa-hf longembed`'s cells); the two round
    the last bit differently, and each command keeps its own so that its kept scores stay reproducible. `window`:
    the candidates are the documents' windows of that many tokens, each its own row (None: each document is one)."""

    readout: ClassVar[Readout]

    def __init__(
        self, embedder: Embedder, query_ids: list[list[int]], torch_products: bool = False, window: int | None = None
    ) -> None:
        self.embedder = embedder
        self.torch_products = torch_products
        self.window = window

    @abstractmethod
    def keep(self, document: list[int]) -> np.ndarray:
        """What a run keeps of a document: (rows, width)."""

    def keep_all(self, documents: list[list[int]], progress: str | None = None) -> tuple[np.ndarray, list[int]]:
        """What `keep` keeps of every document, stacked, and each document's row count."""
        kept = [self.keep(document) for document in documents]
        return np.concatenate(kept), [len(rows) for rows in kept]

    @abstractmethod
    def scores(self, kept: np.ndarray, counts: list[int]) -> np.ndarray:
        """(queries, candidates) from the documents' kept rows, `counts[d]` rows for document d."""

    def vectors_per_document(self, documents: list[list[int]], counts: list[int]) -> float | None:
        """The mean number of vectors a document is kept as, for a read-out of several (None: one)."""
        return None


class MeanScorer(Scorer):
    """One vector a text (`Embedder.read`), or a window (`window_vectors`): a candidate scores its cosine with the
    query."""

    readout = MEAN

    def __init__(
        self, embedder: Embedder, query_ids: list[list[int]], torch_products: bool = False, window: int | None = None
    ) -> None:
        super().__init__(embedder, query_ids, torch_products, window)
        self.queries = embedder.read(query_ids)

    def keep(self, document: list[int]) -> np.ndarray:
        if self.window is not None:
            return window_vectors(self.embedder, document, self.window)
        return self.embedder.read([document]).numpy()

    def keep_all(self, documents: list[list[int]], progress: str | None = None) -> tuple[np.ndarray, list[int]]:
        if self.window is not None:
            return super().keep_all(documents, progress)
        return self.embedder.read(documents, progress).numpy(), [1] * len(documents)

    def scores(self, kept: np.ndarray, counts: list[int]) -> np.ndarray:
        if self.torch_products:
            return (self.queries @ torch.from_numpy(kept).T).numpy()
        return self.queries.numpy() @ kept.T

    def vectors_per_document(self, documents: list[list[int]], counts: list[int]) -> float | None:
        return None if self.window is None else float(np.mean(counts))


class MaxScorer(Scorer):
    """One vector per window of T tokens (T: the position table; `window_vectors`), at the chunks' boundaries: the
    chunks' own embeddings where the reading reads them apart (`chunk:`), else the mean of the whole document's
    token states over each window. A document scores its best window's cosine with the query (one vector)."""

    readout = MAX

    def __init__(
        self, embedder: Embedder, query_ids: list[list[int]], torch_products: bool = False, window: int | None = None
    ) -> None:
        super().__init__(embedder, query_ids, torch_products, window)
        self.queries = embedder.read(query_ids).numpy()

    def keep(self, document: list[int]) -> np.ndarray:
        return window_vectors(self.embedder, document, self.embedder.spec.table_length)

    def scores(self, kept: np.ndarray, counts: list[int]) -> np.ndarray:
        starts = np.cumsum([0, *counts[:-1]])
        return np.maximum.reduceat(self.queries @ kept.T, starts, axis=1)

    def vectors_per_document(self, documents: list[list[int]], counts: list[int]) -> float | None:
        return float(np.mean(counts))


class LateScorer(Scorer):
    """One vector a token as the reading gives them (`Embedder.read_tokens`), scored by late interaction (ColBERT's
    MaxSim, `ranking.LateInteraction`) as soon as the document is read: a run keeps a document's scores, one a
    query, not its token vectors; with a `window`, each window's scores against its own token vectors
    (`window_token_vectors`). The products run on the model's device, where the token states already are."""

    readout = LATE

    def __init__(
        self, embedder: Embedder, query_ids: list[list[int]], torch_products: bool = False, window: int | None = None
    ) -> None:
        super().__init__(embedder, query_ids, torch_products, window)
        device = embedder.model.device
        queries = [embedder.read_tokens(query) for query in query_ids]
        self.late = LateInteraction(queries, None if device.type == "cpu" else device)

    def keep(self, document: list[int]) -> np.ndarray:
        if self.window is None:
            return self.late(self.embedder.document_tokens(document))[None]
        return np.stack([self.late(tokens) for tokens in window_token_vectors(self.embedder, document, self.window)])

    def scores(self, kept: np.ndarray, counts: list[int]) -> np.ndarray:
        return kept.T

    def vectors_per_document(self, documents: list[list[int]], counts: list[int]) -> float | None:
        return float(np.mean([sum(len(piece) - 2 for piece in self.embedder.pieces(d)) for d in documents]))


@torch.no_grad()
def window_vectors(embedder: Embedder, document: list[int], window: int) -> np.ndarray:
    """(windows, dim): one normalised vector per window of `window` tokens, each read apart where the reading reads
    pieces apart, else the mean of the whole read's token states over it."""
    if not embedder.spec.reading.one_pass:
        return embedder.embed(embedder.pieces(document, window)).numpy()
    return window_means(embedder.token_states(document)[1:-1], window - 2).cpu().numpy()


def window_token_vectors(embedder: Embedder, document: list[int], window: int) -> list[torch.Tensor]:
    """Each window's normalised token vectors (`Embedder.read_tokens`): of the window read apart where the reading
    reads pieces apart, else its part of the whole read's."""
    if not embedder.spec.reading.one_pass:
        return [embedder.read_tokens(piece) for piece in embedder.pieces(document, window)]
    tokens, step = embedder.document_tokens(document), window - 2
    return [tokens[start : start + step] for start in range(0, len(tokens), step)]


SCORERS: dict[str, type[Scorer]] = {scorer.readout.name: scorer for scorer in (MeanScorer, MaxScorer, LateScorer)}


def scorer_for(
    embedder: Embedder, query_ids: list[list[int]], torch_products: bool = False, window: int | None = None
) -> Scorer:
    """The scorer of the loaded system's read-out, its queries read."""
    return SCORERS[embedder.spec.readout.name](embedder, query_ids, torch_products, window)
