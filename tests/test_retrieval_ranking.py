"""The retrieval measures (ranks with ties against the query, nDCG@10, MRR@10, and with several relevant candidates
nDCG@10 and Recall@10/@50), BM25 against the formula computed by hand, reciprocal-rank fusion against a hand
computation, and late interaction's MaxSim against a direct loop."""

from __future__ import annotations

import math
import re

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from tisa_hf.embeddings.retrieval import ranking
from tisa_hf.embeddings.retrieval.ranking import answer_ranks, per_query, reciprocal_rank_fusion
from tisa_hf.errors import UsageError


@pytest.mark.parametrize("block", [2, 10**6], ids=["blocks-of-query-tokens", "one-block"])
def test_late_interaction_equals_maxsim_computed_directly(monkeypatch, block):
    monkeypatch.setattr(ranking, "MAXSIM_BLOCK_PRODUCTS", block)  # 2: one query token a block against 3 tokens
    generator = np.random.default_rng(0)
    documents = [generator.normal(size=(tokens, 5)) for tokens in (3, 1, 4)]
    queries = [generator.normal(size=(tokens, 5)) for tokens in (2, 3, 1)]
    expected = [[np.mean([max(q @ d for d in document) for q in query]) for document in documents] for query in queries]
    for device in (None, torch.device("cpu")):  # numpy, and the torch path a GPU takes
        late = ranking.LateInteraction(queries, device)
        np.testing.assert_allclose(np.stack([late(document) for document in documents], axis=1), expected, rtol=1e-12)


@pytest.mark.parametrize("device", [None, torch.device("cpu")], ids=["numpy", "torch"])
def test_late_interaction_takes_tensors_as_it_takes_arrays(device):
    generator = torch.Generator().manual_seed(0)
    queries = [torch.randn(tokens, 5, generator=generator) for tokens in (2, 3)]
    document = torch.randn(4, 5, generator=generator)
    from_tensors = ranking.LateInteraction(queries, device)(document)
    from_arrays = ranking.LateInteraction([query.numpy() for query in queries], device)(document.numpy())
    np.testing.assert_array_equal(from_tensors, from_arrays)


def test_late_interaction_refuses_a_text_without_token_vectors():
    vectors = np.ones((2, 3))
    with pytest.raises(ValueError) as error:
        ranking.LateInteraction([vectors, vectors[:0]])
    assert str(error.value) == "late interaction: a query has no token vectors (an empty text); give it some words."
    with pytest.raises(ValueError) as error:
        ranking.LateInteraction([vectors])(vectors[:0])
    assert str(error.value) == "late interaction: a document has no token vectors (an empty text); give it some words."


pytest.importorskip("bm25s")
from bm25s.stopwords import STOPWORDS_EN  # noqa: E402

from tisa_hf.embeddings.lexical import bm25_scores, bm25_tokenizer  # noqa: E402


def test_acc_at_1_counts_strict_wins():
    documents = F.normalize(torch.eye(4)[:, :3] + 0.1, dim=-1)  # document 3 is the same as nothing else
    queries = F.normalize(torch.tensor([[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0], [1.0, 0.0, 0.0]]), dim=-1)
    # query 0 -> doc 0 (right), query 1 -> doc 1 but asks for 2, query 2 -> doc 2 (right), query 3 asks for 3
    assert per_query("acc_at_1", answer_ranks((queries @ documents.T).numpy(), [0, 2, 2, 3])) == [1, 0, 1, 0]
    tied = torch.stack([documents[0], documents[0], documents[1]])
    assert answer_ranks((queries[:1] @ tied.T).numpy(), [0]) == [2]  # a tie with another candidate is a miss


def test_ndcg_and_mrr_at_10_on_a_constructed_ranking():
    scores = -np.tile(np.arange(12.0), (4, 1))  # document i is ranked i + 1 by every query
    ranks = answer_ranks(scores, [0, 2, 9, 11])
    assert ranks == [1, 3, 10, 12]
    assert per_query("ndcg_at_10", ranks) == pytest.approx([1.0, 0.5, 1 / math.log2(11), 0.0])
    assert per_query("mrr_at_10", ranks) == pytest.approx([1.0, 1 / 3, 0.1, 0.0])
    assert per_query("acc_at_1", ranks) == [1.0, 0.0, 0.0, 0.0]


def test_ndcg_and_recall_with_several_relevant_candidates_on_a_constructed_ranking():
    """Binary relevance: DCG over the first 10 positions against the ideal one of min(R, 10) relevant first, recall
    the share of the R relevant in the first k; a tie puts the relevant candidate last among its equals."""
    scores = -np.tile(np.arange(60.0), (5, 1))  # candidate i is at position i + 1 for every query
    scores[2, :3] = 1.0  # query 2: candidates 0, 1 and 2 tie at the top
    relevant = [[0, 2, 11], [9], [1], [4, 55], list(range(12))]
    judge = ranking.SeveralRelevant(relevant)
    result = judge.result(scores)
    assert result["relevant_positions"] == [[1, 3, 12], [10], [3], [5], list(range(1, 13))]  # 56 is past 50
    ideal_3, ideal_2 = 1 + 1 / math.log2(3) + 1 / 2, 1 + 1 / math.log2(3)
    expected = {
        "ndcg_at_10": [(1 + 1 / 2) / ideal_3, 1 / math.log2(11), 1 / 2, (1 / math.log2(6)) / ideal_2, 1.0],
        "recall_at_10": [2 / 3, 1.0, 1.0, 1 / 2, 10 / 12],
        "recall_at_50": [1.0, 1.0, 1.0, 1 / 2, 1.0],
    }
    for measure, values in expected.items():
        assert judge.per_query(result, measure) == pytest.approx(values), measure
        assert result[measure] == pytest.approx(np.mean(values)), measure
    assert list(result) == ["ndcg_at_10", "recall_at_10", "recall_at_50", "relevant_positions"]
    with pytest.raises(ValueError) as error:
        ranking.SeveralRelevant([[0], []])
    assert str(error.value) == "several relevant: a query has no relevant candidate; every query needs one."


def test_reciprocal_rank_fusion_against_a_hand_computation():
    lexical = np.array([[3.0, 1.0, 1.0, 0.0]])  # ranks 1, 2, 2, 4 (ties share the best rank)
    dense = np.array([[0.1, 0.9, 0.5, 0.7]])  # ranks 4, 1, 3, 2
    expected = [1 / 61 + 1 / 64, 1 / 62 + 1 / 61, 1 / 62 + 1 / 63, 1 / 64 + 1 / 62]
    fused = reciprocal_rank_fusion(lexical, dense)
    np.testing.assert_allclose(fused, [expected])
    assert answer_ranks(fused, [1]) == [1] and answer_ranks(fused, [0]) == [2]  # 1/61 + 1/64 beats 1/62 + 1/63


CORPUS = [
    "The meeting discussed the remote control and its battery.",
    "Battery life, battery cost: the battery was the main topic of the meeting today!",
    "Speech recognition results were presented by the professor.",
    "A short one.",
]
QUERIES = ["battery of the remote", "professor presented speech results", "nothing matches here", "battery battery"]


def words_of(text: str, stopwords: frozenset[str]) -> list[str]:
    return [word for word in re.findall(r"\b\w\w+\b", text.lower()) if word not in stopwords]


def direct_bm25(
    documents: list[str], queries: list[str], stopwords: frozenset[str] = frozenset(), k1=1.5, b=0.75
) -> np.ndarray:
    """Lucene's BM25, written out: sum over the query's words (repeats counted) of
    ln(1 + (N - df + 0.5) / (df + 0.5)) * tf / (tf + k1 (1 - b + b |d| / avgdl))."""
    words = [words_of(text, stopwords) for text in documents]
    average = sum(map(len, words)) / len(words)
    scores = np.zeros((len(queries), len(documents)))
    for q, query in enumerate(queries):
        for term in words_of(query, stopwords):
            df = sum(term in document for document in words)
            idf = math.log(1 + (len(documents) - df + 0.5) / (df + 0.5))
            for d, document in enumerate(words):
                tf = document.count(term)
                scores[q, d] += idf * tf / (tf + k1 * (1 - b + b * len(document) / average))
    return scores


def test_bm25_equals_the_formula_computed_directly():
    np.testing.assert_allclose(bm25_scores(CORPUS, QUERIES, "plain"), direct_bm25(CORPUS, QUERIES), rtol=1e-5)
    english = bm25_scores(CORPUS, QUERIES, "english")  # bm25s' stopwords leave the documents and the queries
    stopwords = frozenset(STOPWORDS_EN)
    assert {"the", "of", "by"} <= stopwords and "battery" not in stopwords
    np.testing.assert_allclose(english, direct_bm25(CORPUS, QUERIES, stopwords), rtol=1e-5)
    assert answer_ranks(english[1:2], [2]) == [1]  # the professor's talk, found by its words


def test_an_unknown_bm25_tokenizer_is_refused_naming_the_choices():
    assert bm25_tokenizer("bm25") == "english" and bm25_tokenizer("bm25:plain") == "plain"
    with pytest.raises(UsageError) as error:
        bm25_tokenizer("bm25:porter")
    assert str(error.value) == (
        "bm25:porter: unknown BM25 tokenizer porter; write bm25 (= bm25:english, English stopwords removed) or "
        "bm25:plain."
    )
