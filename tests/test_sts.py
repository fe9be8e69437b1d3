"""`tisa-hf sts`: the score against sentence-transformers' own evaluator, the paired interval, and the one-line
refusals before any model loads."""

from __future__ import annotations

import json
import random
import re

import numpy as np
import pytest
import torch
from embedding_fixtures import WORDS, parse_systems_then_options, record_loaded_systems, write_tiny_encoder
from scipy import stats

from tisa_hf.errors import UsageError

pytest.importorskip("sentence_transformers")
from sentence_transformers import SentenceTransformer  # noqa: E402
from sentence_transformers.sentence_transformer.evaluation import EmbeddingSimilarityEvaluator  # noqa: E402

from tisa_hf.embeddings import sts  # noqa: E402
from tisa_hf.embeddings.options import sts_parser  # noqa: E402

HEADER = "index\tgenre\tfilename\tyear\told_index\tsource1\tsource2\tsentence1\tsentence2\tscore"


def write_pairs(path, pairs: int = 24, words: int = 6, seed: int = 0) -> None:
    """GLUE's STS-B layout, random sentences and scores."""
    rng = random.Random(seed)
    rows = [HEADER]
    for index in range(pairs):
        first, second = (" ".join(rng.choices(WORDS, k=words)) + "." for _ in range(2))
        score = rng.uniform(0, 5)
        rows.append(f"{index}\tmain\tMSRvid\t2012test\t{index:04d}\tnone\tnone\t{first}\t{second}\t{score:.3f}")
    path.write_text("\n".join(rows) + "\n")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("sts")
    write_tiny_encoder(root / "tiny", positions=32)
    write_pairs(root / "dev.tsv")
    return root


def arguments(workspace, out, *systems_and_options: str):
    defaults = ["--out", str(out), "--data", str(workspace / "dev.tsv"), "--bootstrap", "200"]
    return parse_systems_then_options(sts_parser(), defaults, systems_and_options)


@pytest.fixture
def loaded(monkeypatch):
    return record_loaded_systems(monkeypatch)


def test_scores_equal_sentence_transformers_evaluator_and_pairs_on_the_same_pairs(workspace, tmp_path, loaded):
    tiny = str(workspace / "tiny")
    record = sts.run(arguments(workspace, tmp_path / "out", tiny, f"tisa:replace:2:{tiny}", "--paired", tiny))
    first, second, gold = sts.read_pairs(workspace / "dev.tsv")
    expected = EmbeddingSimilarityEvaluator(first, second, gold)(SentenceTransformer(tiny, device="cpu"))
    assert record["results"][tiny]["spearman"] == pytest.approx(100 * expected["spearman_cosine"], abs=1e-6)
    assert record["results"][tiny]["pearson"] == pytest.approx(100 * expected["pearson_cosine"], abs=1e-4)
    paired = record["paired"][tiny][f"tisa:replace:2:{tiny}"]
    difference = record["results"][f"tisa:replace:2:{tiny}"]["spearman"] - record["results"][tiny]["spearman"]
    assert paired["difference"] == pytest.approx(difference, abs=1e-9)
    assert paired["low"] <= paired["difference"] <= paired["high"] and paired["low"] < paired["high"]
    assert record["settings"]["pairs"] == 24 and loaded == [tiny, f"tisa:replace:2:{tiny}"]
    assert json.loads((tmp_path / "out" / "sts.json").read_text())["results"] == record["results"]


def test_paired_interval_resamples_the_same_pairs_for_both():
    rng = np.random.default_rng(0)
    gold = rng.uniform(0, 5, 200)
    cosines = gold + rng.normal(0, 1, 200)
    same = sts.paired_spearman(cosines, cosines, gold, resamples=200, seed=0)
    assert same == {"difference": 0.0, "low": 0.0, "high": 0.0}
    worse = cosines + rng.normal(0, 2, 200)
    paired = sts.paired_spearman(cosines, worse, gold, resamples=200, seed=0)
    direct = 100 * (stats.spearmanr(cosines, gold).statistic - stats.spearmanr(worse, gold).statistic)
    assert paired["difference"] == pytest.approx(direct) and 0 < paired["low"] < direct < paired["high"]


def test_bad_requests_fail_in_one_line_before_any_model_loads(workspace, tmp_path, loaded):
    tiny = str(workspace / "tiny")
    long_pairs = tmp_path / "long.tsv"
    write_pairs(long_pairs, pairs=3, words=40)
    (tmp_path / "done").mkdir()
    (tmp_path / "done" / "sts.json").write_text("{}")
    cases = {
        (tiny, "--data", str(tmp_path / "missing.tsv")): (
            f"--data {tmp_path / 'missing.tsv'}: no such file; pass --data with GLUE's STS-B dev.tsv (the labelled "
            "split)."
        ),
        (tiny, "--data", str(long_pairs)): (
            f"{long_pairs}: its longest sentence takes 43 tokens, more than {tiny} reads (its position table holds "
            "32); give the model as trunc:MODEL to cut sentences at its table."
        ),
        (tiny, "--paired", f"trunc:{tiny}"): f"--paired trunc:{tiny}: a reference must be one of the compared systems.",
        (tiny, tiny): "A system is given twice; give each once.",
    }
    for given, message in cases.items():
        with pytest.raises(UsageError) as error:
            sts.run(arguments(workspace, tmp_path / "out", *given))
        assert str(error.value) == message, given
    with pytest.raises(UsageError) as error:
        sts.run(arguments(workspace, tmp_path / "done", tiny))
    assert re.fullmatch(
        re.escape(
            f"{tmp_path / 'done' / 'sts.json'} holds results of other pairs (data None -> {workspace / 'dev.tsv'}"
        )
        + r"; data_sha256 None -> [0-9a-f]{64}; pairs None -> 24; longest_tokens None -> 9; tokens_sha256 None -> "
        r"[0-9a-f]{64}\); choose another --out, or pass --overwrite to score every system again\.",
        str(error.value),
    )
    assert loaded == [] and not (tmp_path / "out").exists()


@pytest.mark.skipif(torch.cuda.is_available(), reason="refusing --device cuda needs a machine without CUDA")
def test_the_device_is_checked_before_any_model_loads(workspace, tmp_path, loaded):
    """sts checks --device as every command does (`common.machine.checked_device`)."""
    with pytest.raises(UsageError) as error:
        sts.run(arguments(workspace, tmp_path / "out", str(workspace / "tiny"), "--device", "cuda"))
    assert str(error.value) == "--device cuda, but this torch sees no CUDA device; use --device cpu."
    assert loaded == []


def test_a_rerun_scores_only_the_new_systems_and_pairs_them_all(workspace, tmp_path, loaded):
    tiny, tisa = str(workspace / "tiny"), f"tisa:replace:2:{workspace / 'tiny'}"
    both = sts.run(arguments(workspace, tmp_path / "both", tiny, tisa, "--paired", tiny))
    sts.run(arguments(workspace, tmp_path / "out", tiny, "--paired", tiny))
    loaded.clear()
    resumed = sts.run(arguments(workspace, tmp_path / "out", tiny, tisa, "--paired", tiny))
    assert loaded == [tisa]  # the original's cosines come from sts.json
    assert resumed["cosines"] == both["cosines"] and resumed["paired"] == both["paired"]
    assert {
        name: {k: v for k, v in scores.items() if k != "wall_time_s"} for name, scores in both["results"].items()
    } == {name: {k: v for k, v in scores.items() if k != "wall_time_s"} for name, scores in resumed["results"].items()}
    results = tmp_path / "out" / "sts.json"
    record = json.loads(results.read_text())
    del record["cosines"]
    results.write_text(json.dumps(record))
    with pytest.raises(UsageError) as error:
        sts.run(arguments(workspace, tmp_path / "out", tiny))
    assert str(error.value) == (
        f"{results} holds no per-pair cosines to pair with; choose another --out, or pass --overwrite to score every "
        "system again."
    )
    other = tmp_path / "other.tsv"
    write_pairs(other, seed=1)
    with pytest.raises(UsageError, match=r"sts.json holds results of other pairs \(data .*; data_sha256 "):
        sts.run(arguments(workspace, tmp_path / "out", tiny, "--data", str(other)))
    loaded.clear()
    again = sts.run(arguments(workspace, tmp_path / "out", tiny, "--data", str(other), "--overwrite"))
    assert loaded == [tiny] and list(again["results"]) == [tiny] and again["settings"]["pairs"] == 24
