"""scripts/qmsum_candidates.py reads its QMSum score matrices from the committed .npz or from a `tisa-hf qmsum` run's
kept scores, the same numbers either way; the committed file holds every default system's, bit for bit as the
run kept them."""

from __future__ import annotations

import numpy as np
import pytest

from tests.fixtures import load_script
from tisa_hf.common.result_files import file_name, save_array, scores_path
from tisa_hf.embeddings.retrieval.corpus_task import CELL


@pytest.fixture(scope="module")
def candidates():
    return load_script("qmsum_candidates")


def test_a_runs_scores_and_the_npz_saved_from_them_read_the_same(candidates, tmp_path):
    systems = ["late:runs/adapt/s5-all", "late:chunk:minilm"]
    rng = np.random.default_rng(0)
    kept = {name: rng.normal(size=(5, 3)) for name in ["bm25", *systems]}
    for name, scores in kept.items():
        save_array(scores_path(tmp_path / "work", name, CELL), scores)
    from_run = candidates.score_matrices(tmp_path / "work", systems)
    np.savez_compressed(tmp_path / "scores.npz", **{file_name(name): scores for name, scores in from_run.items()})
    from_file = candidates.score_matrices(tmp_path / "scores.npz", systems)
    assert list(from_file) == list(kept)
    for name, scores in kept.items():
        assert np.array_equal(from_run[name], scores) and np.array_equal(from_file[name], scores)
    with pytest.raises(SystemExit) as refused:
        candidates.score_matrices(tmp_path / "scores.npz", ["late:other"])
    assert str(refused.value) == (
        f"{tmp_path / 'scores.npz'} keeps no scores of late:other; pass --scores with a qmsum run's."
    )


def test_the_committed_scores_hold_bm25_and_every_default_system(candidates):
    matrices = candidates.score_matrices(candidates.SCORES, list(candidates.SYSTEMS))
    assert {name: scores.shape for name, scores in matrices.items()} == {
        name: (1527, 197) for name in ["bm25", *candidates.SYSTEMS]
    }
    assert all(scores.dtype == np.float64 for scores in matrices.values())
