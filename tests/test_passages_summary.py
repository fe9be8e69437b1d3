"""scripts/passages_summary.py: each whole read paired to the windows read apart with its own read-out and fusion, the
systems named as the docs write them, and how alike a system's kept window vectors are, against numbers computed
here."""

from __future__ import annotations

import json

import numpy as np
import pytest

from tests.fixtures import load_script
from tisa_hf.common.result_files import file_name

WHOLE = "runs/adapt/s5-all"


@pytest.fixture(scope="module")
def summary():
    return load_script("passages_summary")


def interval(difference: float) -> dict[str, float]:
    return {"ndcg_at_10": {"difference": difference, "low": difference - 0.01, "high": difference + 0.01}}


def record() -> dict:
    apart = ["chunk:minilm", "late:chunk:minilm", "hybrid:bm25+chunk:minilm", "hybrid:bm25+late:chunk:minilm"]
    whole = [WHOLE, f"late:{WHOLE}", f"hybrid:bm25+{WHOLE}", f"hybrid:bm25+late:{WHOLE}"]
    results = {system: {"across": {"ndcg_at_10": 0.1 * (i + 1)}} for i, system in enumerate(["bm25", *apart, *whole])}
    paired = {
        reference: {system: {"across": interval(-0.02 * (j + 1)), "within": interval(0.03)} for system in whole}
        for j, reference in enumerate(["bm25", *apart])
    }
    return {"results": results, "paired": paired}


def test_each_whole_read_is_paired_to_the_windows_read_apart_with_its_read_out(summary):
    rows = summary.context_table({512: record()}, "chunk:minilm")[2:]
    assert rows == [
        "| 512 | `s5-all` | 60.0 | −4.0 [−5.0, −3.0] | +3.0 [+2.0, +4.0] | −2.0 [−3.0, −1.0] | +3.0 [+2.0, +4.0] |",
        "| 512 | `late:s5-all` | 70.0 | −6.0 [−7.0, −5.0] | +3.0 [+2.0, +4.0] | −2.0 [−3.0, −1.0] | "
        "+3.0 [+2.0, +4.0] |",
        "| 512 | `hybrid:bm25+s5-all` | 80.0 | −8.0 [−9.0, −7.0] | +3.0 [+2.0, +4.0] | −2.0 [−3.0, −1.0] | "
        "+3.0 [+2.0, +4.0] |",
        "| 512 | `hybrid:bm25+late:s5-all` | 90.0 | −10.0 [−11.0, −9.0] | +3.0 [+2.0, +4.0] | −2.0 [−3.0, −1.0] | "
        "+3.0 [+2.0, +4.0] |",
    ]


def test_window_similarity_is_the_mean_cosine_within_a_meeting_between_neighbours_and_at_random(summary, tmp_path):
    rng = np.random.default_rng(1)
    vectors = rng.normal(size=(7, 4)).astype(np.float32)
    vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
    kept = tmp_path / "w512" / "embeddings"
    kept.mkdir(parents=True)
    np.save(kept / f"{file_name(WHOLE)}.npy", vectors)
    (kept / f"{file_name(WHOLE)}.json").write_text(json.dumps({"windows": [3, 4]}))
    results = {WHOLE: {}, f"late:{WHOLE}": {}, "bm25": {}}
    row = summary.similarity_table(tmp_path, {512: {"results": results}})[2:]
    meetings = [vectors[:3], vectors[3:]]
    pairs = np.mean([np.mean([a @ b for i, a in enumerate(m) for b in m[i + 1 :]]) for m in meetings])
    neighbours = np.mean([np.mean([m[i] @ m[i + 1] for i in range(len(m) - 1)]) for m in meetings])
    first, second = np.random.default_rng(0).integers(0, 7, (2, 10_000))
    anywhere = np.mean(np.sum(vectors[first] * vectors[second], axis=1))
    assert row == [f"| 512 | `s5-all` | {pairs:.3f} | {neighbours:.3f} | {anywhere:.3f} |"]
