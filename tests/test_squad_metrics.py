"""SQuAD scoring on hand-checked examples: normalisation, EM/F1, the v2 threshold search, post-processing."""

import math

import numpy as np
import pytest

from tisa_hf.finetune.squad.metrics import (
    exact_match,
    f1_score,
    gold_texts,
    normalize_answer,
    postprocess_predictions,
    predictions_at_threshold,
    raw_scores,
    squad_v1_scores,
    squad_v2_scores,
)


def test_normalisation_drops_case_punctuation_articles_and_extra_spaces():
    assert normalize_answer("  The  Cat, an  apple!  ") == "cat apple"
    assert normalize_answer("theatre") == "theatre"  # articles only as whole words
    assert exact_match("The cat", "cat") == 1
    assert exact_match("cat", "cats") == 0


def test_f1_partial_overlap_by_hand():
    # gold tokens {quick, brown, fox}, predicted {quick, red, fox, jumps}: 2 shared, P = 2/4, R = 2/3, F1 = 4/7.
    assert f1_score("the quick brown fox", "quick red fox jumps") == pytest.approx(4 / 7)
    # repeated tokens count with multiplicity: gold [x, x], predicted [x]: 1 shared, P = 1, R = 1/2.
    assert f1_score("x x", "x") == pytest.approx(2 / 3)
    assert f1_score("cat", "dog") == 0.0
    assert f1_score("", "") == 1.0
    assert f1_score("", "dog") == 0.0


def test_scores_take_the_best_gold_answer():
    gold = {"q1": ["Paris", "the city of Paris"], "q2": ["red fox"]}
    exact, f1 = raw_scores(gold, {"q1": "city of Paris", "q2": "fox"})
    assert exact == {"q1": 1, "q2": 0}
    assert f1 == {"q1": 1.0, "q2": pytest.approx(2 / 3)}
    assert squad_v1_scores(gold, {"q1": "city of Paris", "q2": "fox"}) == {
        "exact_match": 50.0,
        "f1": pytest.approx(100 * (1 + 2 / 3) / 2),
    }


def test_missing_prediction_is_named():
    with pytest.raises(ValueError, match=r"No prediction for 1 question\(s\), e.g. \['q2'\]"):
        raw_scores({"q1": ["a"], "q2": ["b"]}, {"q1": "a"})


def test_gold_answers_that_normalise_to_nothing_mean_unanswerable():
    assert gold_texts([]) == [""]
    assert gold_texts(["The", "a"]) == [""]
    assert gold_texts(["the", "Paris"]) == ["Paris"]


GOLD = {"q1": ["Paris"], "q2": ["red fox"], "q3": [], "q4": []}
SPANS = {"q1": "Paris", "q2": "fox", "q3": "dog", "q4": "cat"}
DIFFS = {"q1": -2.0, "q2": 1.0, "q3": 3.0, "q4": 2.0}


def test_v2_scores_by_hand():
    # threshold 0: q1 "Paris" (right), q2 "" (wrong), q3 "" (right), q4 "" (right).
    result = squad_v2_scores(GOLD, SPANS, DIFFS)
    assert result["exact"] == 75.0 and result["f1"] == 75.0 and result["total"] == 4
    assert result["HasAns_exact"] == 50.0 and result["HasAns_total"] == 2
    assert result["NoAns_exact"] == 100.0 and result["NoAns_total"] == 2
    # Answering q2 too (threshold 1.0) adds its F1 2/3: (1 + 2/3 + 1 + 1) / 4.
    assert result["best_f1"] == pytest.approx(100 * (11 / 3) / 4)
    assert result["best_f1_thresh"] == 1.0
    # For EM answering q2 does not help ("fox" vs "red fox"), so the best is the first answered question.
    assert result["best_exact"] == 75.0
    assert result["best_exact_thresh"] == -2.0


def test_best_threshold_matches_a_brute_force_sweep():
    def score_at(threshold, metric):
        exact, f1 = raw_scores(GOLD, predictions_at_threshold(SPANS, DIFFS, threshold))
        values = exact if metric == "exact" else f1
        return 100 * sum(values.values()) / len(values)

    result = squad_v2_scores(GOLD, SPANS, DIFFS)
    thresholds = [-math.inf, *DIFFS.values()]
    for metric in ("exact", "f1"):
        assert result[f"best_{metric}"] == pytest.approx(max(score_at(t, metric) for t in thresholds))
        assert score_at(result[f"best_{metric}_thresh"], metric) == pytest.approx(result[f"best_{metric}"])


def _feature(example_id, offsets, length=11):
    """Offsets padded with None (padding tokens) to the feature length."""
    return {"example_id": example_id, "offset_mapping": offsets + [None] * (length - len(offsets))}


def _logits(length, **values):
    row = np.zeros(length, dtype=np.float32)
    for index, value in values.items():
        row[int(index[1:])] = value
    return row


# "Alice lives in Paris. Bob lives in Rome." split into two overlapping features; tokens 0-2 are [CLS] q [SEP].
CONTEXT_A = "Alice lives in Paris. Bob lives in Rome."
FEATURE_A0 = _feature("a", [None, None, None, (0, 5), (6, 11), (12, 14), (15, 20), (20, 21), None])
FEATURE_A1 = _feature(
    "a", [None, None, None, (15, 20), (20, 21), (22, 25), (26, 31), (32, 34), (35, 39), (39, 40), None]
)
CONTEXT_B = "Cats sleep a lot."
FEATURE_B = _feature("b", [None, None, None, (0, 4), (5, 10), (11, 12), (13, 16), (16, 17), None])
CONTEXT_C = "one two three four five"
FEATURE_C = _feature("c", [None, None, None, (0, 3), (4, 7), (8, 13), (14, 18), (19, 23), None])


def _hand_made():
    examples = [
        {"id": "a", "context": CONTEXT_A},
        {"id": "b", "context": CONTEXT_B},
        {"id": "c", "context": CONTEXT_C},
    ]
    features = [FEATURE_A0, FEATURE_A1, FEATURE_B, FEATURE_C]
    starts = [
        _logits(11, t0=1.0, t6=3.0),  # "Paris" = 3 + 3, null 1 + 1
        _logits(11, t0=0.5, t3=2.5, t8=4.0),  # "Rome" = 4 + 4 beats "Paris" in either feature, null 0.5 + 0.5
        _logits(11, t0=5.0, t6=2.0),  # null 5 + 5 beats "lot" 2 + 2
        _logits(11, t3=5.0, t6=3.0),  # "one .. five" = 10 is 5 tokens long; "four five" = 8
    ]
    ends = [
        _logits(11, t0=1.0, t6=3.0),
        _logits(11, t0=0.5, t3=2.5, t8=4.0),
        _logits(11, t0=5.0, t6=2.0),
        _logits(11, t4=2.0, t7=5.0),
    ]
    return examples, features, np.stack(starts), np.stack(ends)


def test_postprocessing_picks_the_best_span_over_all_features_of_an_example():
    examples, features, starts, ends = _hand_made()
    spans, diffs = postprocess_predictions(examples, features, starts, ends, n_best_size=20, max_answer_length=30)
    assert spans == {"a": "Rome", "b": "lot", "c": "one two three four five"}
    # null score: the smallest [CLS] score over the example's features.
    assert diffs["a"] == pytest.approx(1.0 - 8.0)
    assert diffs["b"] == pytest.approx(10.0 - 4.0)
    assert diffs["c"] == pytest.approx(0.0 - 10.0)


def test_null_score_wins_for_the_impossible_question():
    examples, features, starts, ends = _hand_made()
    spans, diffs = postprocess_predictions(examples, features, starts, ends)
    assert predictions_at_threshold(spans, diffs, 0.0)["b"] == ""
    assert predictions_at_threshold(spans, diffs, 6.5)["b"] == "lot"


def test_max_answer_length_filters_long_spans():
    examples, features, starts, ends = _hand_made()
    spans, diffs = postprocess_predictions(examples, features, starts, ends, max_answer_length=3)
    assert spans["c"] == "four five"
    assert diffs["c"] == pytest.approx(0.0 - 8.0)


def test_n_best_size_limits_the_candidates():
    examples, features, starts, ends = _hand_made()
    # With one start and one end candidate, feature C only has the pair (t3, t7), 5 tokens: no valid span.
    spans, diffs = postprocess_predictions(examples, features, starts, ends, n_best_size=1, max_answer_length=3)
    assert spans["c"] == "" and diffs["c"] == math.inf


def test_logit_rows_must_match_the_features():
    examples, features, starts, ends = _hand_made()
    with pytest.raises(ValueError, match="4 features but 3 start and 4 end logit rows"):
        postprocess_predictions(examples, features, starts[:3], ends)
