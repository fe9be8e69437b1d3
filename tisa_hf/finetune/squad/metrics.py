"""SQuAD scoring: from start/end logits to answer texts, and exact match / F1 as the official scripts compute them.

The official evaluation scripts (v1.1 and v2.0) are not packaged on PyPI as a library, and `evaluate`'s
`squad`/`squad_v2` metrics must be fetched from the Hub, so their logic is re-implemented here line for line:
answer normalisation, EM and F1 (maximum over the gold answers), the HasAns/NoAns split and `find_best_thresh`.
"""

from __future__ import annotations

import collections
import re
import string
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

_PUNCTUATION = set(string.punctuation)
_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)


def normalize_answer(text: str) -> str:
    """Lower case, drop punctuation and the articles a/an/the, collapse whitespace (official order)."""
    text = "".join(ch for ch in text.lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match(gold: str, prediction: str) -> int:
    return int(normalize_answer(gold) == normalize_answer(prediction))


def f1_score(gold: str, prediction: str) -> float:
    """Token-level F1 of the normalised answers; two empty answers score 1, one empty answer scores 0."""
    gold_tokens = normalize_answer(gold).split()
    predicted_tokens = normalize_answer(prediction).split()
    if not gold_tokens or not predicted_tokens:
        return float(gold_tokens == predicted_tokens)
    common = sum((collections.Counter(gold_tokens) & collections.Counter(predicted_tokens)).values())
    if common == 0:
        return 0.0
    precision = common / len(predicted_tokens)
    recall = common / len(gold_tokens)
    return 2 * precision * recall / (precision + recall)


def gold_texts(answers: Iterable[str]) -> list[str]:
    """The gold answers that survive normalisation; `[""]` for an unanswerable question (official v2 rule)."""
    texts = [text for text in answers if normalize_answer(text)]
    return texts or [""]


def raw_scores(
    gold: Mapping[str, Sequence[str]], predictions: Mapping[str, str]
) -> tuple[dict[str, int], dict[str, float]]:
    """Per-question exact match and F1, each the maximum over that question's gold answers."""
    missing = sorted(set(gold) - set(predictions))
    if missing:
        raise ValueError(f"No prediction for {len(missing)} question(s), e.g. {missing[:3]}.")
    exact, f1 = {}, {}
    for qid, answers in gold.items():
        texts = gold_texts(answers)
        exact[qid] = max(exact_match(text, predictions[qid]) for text in texts)
        f1[qid] = max(f1_score(text, predictions[qid]) for text in texts)
    return exact, f1


def squad_v1_scores(gold: Mapping[str, Sequence[str]], predictions: Mapping[str, str]) -> dict[str, float]:
    """The official v1.1 result: `exact_match` and `f1` in percent."""
    exact, f1 = raw_scores(gold, predictions)
    return {
        "exact_match": 100.0 * float(np.mean(list(exact.values()))),
        "f1": 100.0 * float(np.mean(list(f1.values()))),
    }


def find_best_thresh(
    predictions: Mapping[str, str],
    scores: Mapping[str, float],
    na_probs: Mapping[str, float],
    qid_to_has_ans: Mapping[str, bool],
) -> tuple[float, float]:
    """The official v2 script's threshold search: the best score in percent and the `na_prob` threshold above
    which answering "no answer" gives it (questions are answered when their na_prob is at most the threshold)."""
    current = best = sum(1 for has_answer in qid_to_has_ans.values() if not has_answer)
    best_thresh = 0.0
    for qid in sorted(na_probs, key=lambda k: na_probs[k]):
        if qid not in scores:
            continue
        if qid_to_has_ans[qid]:
            current += scores[qid]
        else:
            current += -1 if predictions[qid] else 0
        if current > best:
            best = current
            best_thresh = na_probs[qid]
    return 100.0 * best / len(scores), best_thresh


def squad_v2_scores(
    gold: Mapping[str, Sequence[str]],
    best_spans: Mapping[str, str],
    null_score_diffs: Mapping[str, float],
    null_score_diff_threshold: float = 0.0,
) -> dict[str, float]:
    """The official v2.0 result.

    Args:
        gold: question id -> gold answer texts (empty for unanswerable questions).
        best_spans: question id -> best non-null span.
        null_score_diffs: question id -> null score minus best span score (the script's `na_prob`).
        null_score_diff_threshold: the question is answered "" when its diff exceeds this.

    Returns `exact`, `f1`, `total`, the same on the `HasAns_` and `NoAns_` subsets, and `best_exact`/`best_f1` with
    the thresholds that reach them (`best_exact_thresh`, `best_f1_thresh`).
    """
    predictions = predictions_at_threshold(best_spans, null_score_diffs, null_score_diff_threshold)
    exact, f1 = raw_scores(gold, predictions)
    has_answer = {qid: gold_texts(answers) != [""] for qid, answers in gold.items()}
    result: dict[str, float] = {}
    subsets = {
        "": list(gold),
        "HasAns_": [q for q in gold if has_answer[q]],
        "NoAns_": [q for q in gold if not has_answer[q]],
    }
    for prefix, qids in subsets.items():
        if qids:
            result[f"{prefix}exact"] = 100.0 * float(np.mean([exact[q] for q in qids]))
            result[f"{prefix}f1"] = 100.0 * float(np.mean([f1[q] for q in qids]))
            result[f"{prefix}total"] = float(len(qids))
    span_exact, span_f1 = raw_scores(gold, best_spans)
    for name, scores in (("exact", span_exact), ("f1", span_f1)):
        best, thresh = find_best_thresh(best_spans, scores, null_score_diffs, has_answer)
        result[f"best_{name}"] = best
        result[f"best_{name}_thresh"] = thresh
    return result


def predictions_at_threshold(
    best_spans: Mapping[str, str], null_score_diffs: Mapping[str, float], threshold: float
) -> dict[str, str]:
    """The answer "" where the null score beats the best span by more than `threshold`, else the span."""
    return {qid: "" if null_score_diffs[qid] > threshold else span for qid, span in best_spans.items()}


@dataclass(frozen=True)
class SpanCandidate:
    """One answer span of a feature: character offsets into the context and its score (start + end logit)."""

    start_char: int
    end_char: int
    score: float


def feature_span_candidates(
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    offset_mapping: Sequence[Sequence[int] | None],
    n_best_size: int,
    max_answer_length: int,
) -> list[SpanCandidate]:
    """Spans from the `n_best_size` best start and end tokens of one feature that lie inside the context
    (tokens whose offset is None are outside it), end at or after their start and are at most
    `max_answer_length` tokens long."""
    best_starts = np.argsort(start_logits)[::-1][:n_best_size]
    best_ends = np.argsort(end_logits)[::-1][:n_best_size]
    candidates = []
    for start in best_starts:
        for end in best_ends:
            if end < start or end - start + 1 > max_answer_length:
                continue
            if offset_mapping[start] is None or offset_mapping[end] is None:
                continue
            score = float(start_logits[start] + end_logits[end])
            candidates.append(SpanCandidate(int(offset_mapping[start][0]), int(offset_mapping[end][1]), score))
    return candidates


def postprocess_predictions(
    examples: Sequence[Mapping],
    features: Sequence[Mapping],
    start_logits: np.ndarray,
    end_logits: np.ndarray,
    n_best_size: int = 20,
    max_answer_length: int = 30,
) -> tuple[dict[str, str], dict[str, float]]:
    """Per-example answers from the logits of all features (one row of logits per feature, in order).

    Each example takes its best-scoring span over all of its features, mapped back to context text through the
    offsets, and its null score: the smallest start + end logit at the first ([CLS]) token over its features.

    Returns (question id -> best non-null span text, question id -> null score minus that span's score). An
    example without any valid span gets "" and a diff of +inf.
    """
    if len(features) != len(start_logits) or len(features) != len(end_logits):
        raise ValueError(
            f"{len(features)} features but {len(start_logits)} start and {len(end_logits)} end logit rows; "
            "pass the logits of every evaluation feature, in order."
        )
    features_of_example: dict[str, list[int]] = collections.defaultdict(list)
    for index, feature in enumerate(features):
        features_of_example[feature["example_id"]].append(index)
    best_spans, null_score_diffs = {}, {}
    for example in examples:
        qid = example["id"]
        null_score = np.inf
        candidates: list[SpanCandidate] = []
        for index in features_of_example.get(qid, []):
            starts, ends = np.asarray(start_logits[index]), np.asarray(end_logits[index])
            null_score = min(null_score, float(starts[0] + ends[0]))
            offsets = features[index]["offset_mapping"]
            candidates += feature_span_candidates(starts, ends, offsets, n_best_size, max_answer_length)
        if not candidates:
            best_spans[qid], null_score_diffs[qid] = "", np.inf
            continue
        best = max(candidates, key=lambda candidate: candidate.score)
        best_spans[qid] = example["context"][best.start_char : best.end_char]
        null_score_diffs[qid] = null_score - best.score
    return best_spans, null_score_diffs
