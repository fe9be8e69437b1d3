"""BM25, the lexical baseline every long-document retrieval is measured against, from bm25s.

bm25s' defaults: the Lucene variant (idf = ln(1 + (N - df + 0.5) / (df + 0.5)); term weight
tf / (tf + k1 (1 - b + b |d| / avgdl))), k1 = 1.5, b = 0.75. Texts are tokenised by bm25s' own tokenizer:
lowercased, words of two or more word characters (`(?u)\\b\\w\\w+\\b`), no stemming, and with the `english`
tokenizer (`bm25`, `bm25:english`) bm25s' English stopwords removed; `bm25:plain` keeps every word.

The spellings of the systems that read the text are this module's too: `bm25[:TOKENIZER]`, and the two fusions
of a BM25 system with a model system (`retrieval/ranking.py`): `hybrid:BM25+SYSTEM` fuses their rankings,
`convex:W:BM25+SYSTEM` their scores.
"""

from __future__ import annotations

import numpy as np

from ..errors import UsageError

BM25_NAME = "bm25"
STOPWORDS = {"english": "english", "plain": None}  # tokenizer name -> bm25s' stopwords
DEFAULT_TOKENIZER = "english"
HYBRID_PREFIX = "hybrid:"
CONVEX_PREFIX = "convex:"
TEXT_SYSTEMS_HELP = {
    BM25_NAME: "BM25 on the text, English stopwords removed; bm25:plain keeps them",
    f"{HYBRID_PREFIX}BM25+SYSTEM": "reciprocal-rank fusion, k = 60, of a BM25 system's and a model system's "
    "rankings, both given as systems too",
    f"{CONVEX_PREFIX}W:BM25+SYSTEM": "score-normalised convex fusion: W times the model system's scores plus 1 - W "
    "times the BM25 system's, each min-max normalised over a query's candidates (W from 0 to 1), both given as "
    "systems too",
}
HYBRID_FORM = "write hybrid:BM25+SYSTEM, e.g. hybrid:bm25+chunk:minilm"
CONVEX_FORM = "write convex:W:BM25+SYSTEM, W from 0 to 1, e.g. convex:0.3:bm25+late:chunk:minilm"


def is_lexical(spec: str) -> bool:
    return spec == BM25_NAME or spec.startswith(f"{BM25_NAME}:")


def split_hybrid(spec: str) -> tuple[str, str, float | None] | None:
    """A fusion's BM25 spelling, model system and weight (None: reciprocal-rank fusion, `hybrid:`; W: convex
    fusion, `convex:W:`), split after the BM25 spelling (a model's name may hold a `+`); None for a spelling that
    fuses nothing."""
    if spec.startswith(HYBRID_PREFIX):
        body, weight, form = spec.removeprefix(HYBRID_PREFIX), None, HYBRID_FORM
    elif spec.startswith(CONVEX_PREFIX):
        written, _, body = spec.removeprefix(CONVEX_PREFIX).partition(":")
        weight, form = fusion_weight(written), CONVEX_FORM
        if weight is None:
            raise UsageError(f"{spec}: {CONVEX_FORM}.")
    else:
        return None
    lexical = [BM25_NAME, *(f"{BM25_NAME}:{name}" for name in STOPWORDS)]
    for name in sorted(lexical, key=len, reverse=True):
        if body.startswith(f"{name}+"):
            return name, body.removeprefix(f"{name}+"), weight
    raise UsageError(f"{spec}: {form}.")


def fusion_weight(written: str) -> float | None:
    """`written` as a convex fusion's weight, a number from 0 to 1; None where it is none."""
    try:
        weight = float(written)
    except ValueError:
        return None
    return weight if 0 <= weight <= 1 else None


def bm25_tokenizer(spec: str) -> str:
    """The tokenizer of a `bm25` or `bm25:TOKENIZER` spelling; an unknown one is refused naming the choices."""
    name = spec.removeprefix(BM25_NAME).removeprefix(":") or DEFAULT_TOKENIZER
    if name not in STOPWORDS:
        raise UsageError(
            f"{spec}: unknown BM25 tokenizer {name}; write bm25 (= bm25:{DEFAULT_TOKENIZER}, English stopwords "
            f"removed) or bm25:{' or bm25:'.join(name for name in STOPWORDS if name != DEFAULT_TOKENIZER)}."
        )
    return name


def tokenize(texts: list[str], tokenizer: str) -> list[list[str]]:
    import bm25s

    return bm25s.tokenize(texts, stopwords=STOPWORDS[tokenizer], return_ids=False, show_progress=False)


def bm25_index(documents: list[str], tokenizer: str):
    """bm25s' BM25 index of `documents` (`bm25s.BM25`, whose `save` and `load` keep it)."""
    import bm25s

    index = bm25s.BM25()
    index.index(tokenize(documents, tokenizer), show_progress=False)
    return index


def query_scores(index, queries: list[str], tokenizer: str, documents: int) -> np.ndarray:
    """BM25 scores of an index of `documents` documents, queries x documents (a query word absent from every
    document adds nothing; a query of stopwords alone scores 0 everywhere)."""
    rows = [index.get_scores(words) if words else np.zeros(documents) for words in tokenize(queries, tokenizer)]
    return np.stack(rows).astype(np.float64)


def bm25_scores(documents: list[str], queries: list[str], tokenizer: str) -> np.ndarray:
    """BM25 scores, queries x documents (`query_scores`)."""
    return query_scores(bm25_index(documents, tokenizer), queries, tokenizer, len(documents))
