"""`tisa-hf spans`: the passage-to-article task built from WikiText-style text, its depth buckets against a direct
count, and its one-line refusal."""

from __future__ import annotations

import json
import random
from pathlib import Path

import numpy as np
import pytest
from embedding_fixtures import WORDS, tiny_tokenizer, write_tiny_encoder

from tisa_hf.errors import UsageError

pytest.importorskip("sentence_transformers")
pytest.importorskip("bm25s")
from tisa_hf.embeddings.retrieval import spans  # noqa: E402
from tisa_hf.embeddings.retrieval.ranking import per_query  # noqa: E402
from tisa_hf.embeddings.retrieval.span_data import read_span_task, span_starts  # noqa: E402

SHARED_TEST_TEXT = Path(__file__).resolve().parents[2] / "shared" / "text" / "wikitext-2" / "test.txt"


def write_articles(path: Path, sizes=(60, 130, 20, 90), seed: int = 0) -> Path:
    """WikiText's layout: ` = Title = ` lines, a section heading, words with ` @-@ ` joins and `<unk>`s."""
    rng = random.Random(seed)
    lines = []
    for index, size in enumerate(sizes):
        words = [f"topic{index}"] + rng.choices(WORDS, k=size - 3) + ["a @-@ b", "<unk>"]
        lines += [f" = Article {index} = ", "", " = = Section = = ", "", " " + " ".join(words) + " ", ""]
    path.write_text("\n".join(lines))
    return path


def test_passages_do_not_overlap_and_stay_inside_the_article():
    rng = random.Random(3)
    for words, count, span in ((10, 2, 5), (100, 3, 7), (1000, 5, 48)):
        for _ in range(50):
            starts = span_starts(words, count, span, rng)
            assert starts == sorted(starts) and starts[0] >= 0 and starts[-1] + span <= words
            assert all(later - earlier >= span for earlier, later in zip(starts, starts[1:], strict=False))


def test_each_passage_is_cut_from_its_own_article_at_its_depth(tmp_path):
    task = read_span_task(write_articles(tmp_path / "text.txt"), spans_per_article=2, span_words=10, seed=1)
    # the 20-word article is shorter than two passages of 10 words plus room: every article needs 2 x 10 words
    assert len(task.documents) == 4 and len(task.queries) == 8 and task.answers == [0, 0, 1, 1, 2, 2, 3, 3]
    task = read_span_task(tmp_path / "text.txt", spans_per_article=3, span_words=10, seed=1)
    assert len(task.documents) == 3 and task.answers == [0, 0, 0, 1, 1, 1, 2, 2, 2]  # the 20-word article is out
    for query, answer, depth in zip(task.queries, task.answers, task.depths, strict=True):
        words = task.documents[answer].split()
        assert query.split() == words[depth : depth + 10]
    assert "a-b" in task.documents[0] and "<unk>" not in task.documents[0] and "@-@" not in task.documents[0]
    assert read_span_task(tmp_path / "text.txt", 3, 10, seed=1, limit=2).answers == task.answers[:6]


def test_a_missing_text_names_the_option(tmp_path):
    with pytest.raises(UsageError, match=r"^--data .*nowhere.txt: no such file; pass --data with a WikiText-style"):
        spans.main(["bm25", "--out", str(tmp_path / "out"), "--data", str(tmp_path / "nowhere.txt")])
    write_articles(tmp_path / "short.txt", sizes=(10, 12))
    with pytest.raises(UsageError, match=r"has no article of 144 words or more .* or a smaller --span-words\.$"):
        spans.main(["bm25", "--out", str(tmp_path / "out"), "--data", str(tmp_path / "short.txt")])


def test_depth_buckets_count_tokens_before_each_passage_and_average_its_ranks(tmp_path):
    text = write_articles(tmp_path / "text.txt", sizes=(700, 300, 900))
    tiny = write_tiny_encoder(tmp_path / "tiny", positions=32)
    out = tmp_path / "out"
    argv = ["bm25", f"trunc:{tiny}", "--out", str(out), "--data", str(text), "--span-words", "12", "--bootstrap", "50"]
    assert spans.main(argv) == 0
    record = json.loads((out / "spans.json").read_text())
    task = read_span_task(text, 3, 12)
    # counted word by word ([CLS] first): WordPiece splits within whitespace-separated words only
    tokenizer = tiny_tokenizer()
    pieces = [[len(tokenizer.tokenize(word)) for word in document.split()] for document in task.documents]
    expected_depths = [1 + sum(pieces[answer][:depth]) for answer, depth in zip(task.answers, task.depths, strict=True)]
    assert expected_depths != [depth + 1 for depth in task.depths]  # some words are several tokens
    depths, unit = spans.passage_depths(task, tokenizer)
    assert unit == "tokens" and depths == expected_depths
    buckets = record["by_depth"]
    assert sum(bucket["queries"] for bucket in buckets.values()) == len(task.queries) == 9
    ranks = np.asarray(per_query("acc_at_1", record["results"]["bm25"]["ranks"]))
    first = np.asarray(expected_depths) < 512
    assert buckets["0-512 tokens"]["queries"] == int(first.sum())
    assert buckets["0-512 tokens"]["systems"]["bm25"]["acc_at_1"] == pytest.approx(ranks[first].mean())
    assert "by where the passage starts" in (out / "spans.md").read_text()
    assert spans.passage_depths(task, None) == (task.depths, "words")


@pytest.mark.skipif(not SHARED_TEST_TEXT.is_file(), reason="../shared/text/wikitext-2 is absent")
def test_the_real_development_task_has_its_stated_size():
    task = read_span_task(SHARED_TEST_TEXT)
    assert (len(task.documents), len(task.queries)) == (61, 183)
