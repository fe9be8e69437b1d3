"""An approximate candidate stage over token vectors, in PLAID's way (Santhanam et al., 2022): the index's token
vectors are clustered by k-means (faiss) into centroids, each document is kept as the set of centroids its tokens
fall in, and a query scores a document by the mean over its tokens of the best similarity between the token and
one of the document's centroids among the token's `probes` nearest (0 where none is the document's). The documents
with the best such scores are the candidates that exact MaxSim then ranks: a centroid stands for its tokens, so a
document whose tokens lie near the query's is found without reading its vectors.

faiss learns the centroids (`faiss.Kmeans`) and finds each token's nearest ones (`IndexFlatIP`); what no library
does for an index of token vectors, the postings from centroids to documents and the scores summed over them, is
written here (PLAID's own code is the only other, and it pins other versions of torch: see docs/long-documents.md).
"""

from __future__ import annotations

import numpy as np

from ..errors import UsageError

KMEANS_ITERATIONS = 10
TRAINING_VECTORS_A_CENTROID = 40  # faiss asks for at least 39 a centroid
MIN_CENTROIDS = 16
SEED = 0


def centroid_count(tokens: int, most: int) -> int:
    """How many centroids `tokens` training vectors learn: a power of 2, `TRAINING_VECTORS_A_CENTROID` vectors a
    centroid, at most `most`."""
    fit = 2 ** int(np.log2(max(tokens // TRAINING_VECTORS_A_CENTROID, 1)))
    if fit < MIN_CENTROIDS:
        raise UsageError(
            f"The first part has {tokens} token vectors, too few to learn the token candidate stage's "
            f"{MIN_CENTROIDS} centroids ({MIN_CENTROIDS * TRAINING_VECTORS_A_CENTROID} at least); give a larger "
            "--part-size."
        )
    return min(fit, most)


def train_centroids(rows: np.ndarray, most: int) -> np.ndarray:
    """(centroids, dim) unit vectors learned by spherical k-means from (tokens, dim) `rows`."""
    import faiss

    count = centroid_count(len(rows), most)
    picked = np.sort(np.random.default_rng(SEED).permutation(len(rows))[: count * TRAINING_VECTORS_A_CENTROID])
    kmeans = faiss.Kmeans(rows.shape[1], count, niter=KMEANS_ITERATIONS, spherical=True, seed=SEED)
    kmeans.train(np.ascontiguousarray(rows[picked], dtype=np.float32))
    return kmeans.centroids


def nearest_centroids(centroids: np.ndarray, rows: np.ndarray, probes: int) -> tuple[np.ndarray, np.ndarray]:
    """(similarities, ids), each (tokens, probes): every row's `probes` most similar centroids, best first."""
    import faiss

    search = faiss.IndexFlatIP(centroids.shape[1])
    search.add(np.ascontiguousarray(centroids, dtype=np.float32))
    return search.search(np.ascontiguousarray(rows, dtype=np.float32), probes)


def document_centroids(centroids: np.ndarray, documents: list[np.ndarray]) -> list[np.ndarray]:
    """Each document's sorted distinct centroids: those its token vectors are nearest to."""
    if not documents:
        return []
    _, nearest = nearest_centroids(centroids, np.concatenate(documents), 1)
    bounds = np.cumsum([0, *map(len, documents)])
    return [np.unique(nearest[start:end, 0]) for start, end in zip(bounds[:-1], bounds[1:], strict=True)]


class Postings:
    """Centroid c's documents are `documents[starts[c]:starts[c + 1]]` (compressed sparse rows, from each
    document's centroids)."""

    def __init__(self, starts: np.ndarray, documents: np.ndarray) -> None:
        self.starts, self.documents = starts, documents

    @classmethod
    def invert(cls, per_document: list[np.ndarray], centroids: int) -> Postings:
        owners = np.repeat(np.arange(len(per_document)), [len(ids) for ids in per_document])
        ids = np.concatenate(per_document) if per_document else np.zeros(0, dtype=np.int64)
        order = np.argsort(ids, kind="stable")
        starts = np.concatenate([[0], np.cumsum(np.bincount(ids, minlength=centroids))])
        return cls(starts.astype(np.int64), owners[order].astype(np.int64))


def approximate_scores(
    query: np.ndarray, centroids: np.ndarray, postings: Postings, documents: int, probes: int
) -> np.ndarray:
    """(documents,): for each document, the mean over the query's (tokens, dim) vectors of the best similarity of
    the token to one of the document's centroids among the token's `probes` nearest (0 where none is)."""
    similarities, ids = nearest_centroids(centroids, query, probes)
    best = np.zeros((len(query), documents))
    for token, (scores, found) in enumerate(zip(similarities, ids, strict=True)):
        # Best first: a document is written by each of its centroids, the last (best) write staying.
        for score, centroid in zip(scores[::-1], found[::-1], strict=True):
            best[token, postings.documents[postings.starts[centroid] : postings.starts[centroid + 1]]] = score
    return best.mean(axis=0)
