"""`tisa-hf context-passages` and `tisa-hf context-train`: the articles, windows and queries of a tiny WikiText file
(every count by hand), the training rows built from the same text asking what the task asks, the in-sequence loss
against a direct computation, training that lowers it, a saved model that reloads to the same embeddings, an
interrupted run that resumes to the uninterrupted one's weights, and the one-line refusals before any model loads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from embedding_fixtures import tiny_tokenizer, write_tiny_encoder

from tisa_hf.errors import UsageError

pytest.importorskip("sentence_transformers")
pytest.importorskip("bm25s")
from sentence_transformers import SentenceTransformer  # noqa: E402
from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer  # noqa: E402

from tisa_hf.context import train  # noqa: E402
from tisa_hf.context.articles import read_titled_articles  # noqa: E402
from tisa_hf.context.dev_data import build_context_passages  # noqa: E402
from tisa_hf.context.dev_task import run as run_task  # noqa: E402
from tisa_hf.context.loss import InSequenceLoss  # noqa: E402
from tisa_hf.context.options import context_train_parser  # noqa: E402
from tisa_hf.context.training_rows import build_training_rows  # noqa: E402
from tisa_hf.embeddings.options import context_passages_parser  # noqa: E402

# Every word is one token of the tiny tokenizer. "Blue" names the first article (4 letters; "Sky" has 3), "Yellow" the
# second; the article titled "<unk> <unk>" has no name and is left out.
WIKITEXT_LINES = [
    "= Blue Sky =",
    "Blue Sky is the green grass . what is yellow grass",
    "the yellow green grass is blue",
    "= = Green Grass = =",
    "the green grass is yellow sun . Blue sun green yellow grass is the sky",
    "= <unk> <unk> =",
    "the sky is blue",
    "= Yellow Sun =",
    "what is the yellow sun . the Yellow grass is green",
]
WIKITEXT = "".join(f" {line} \n \n" for line in WIKITEXT_LINES)  # WikiText's spaced lines, blank lines between
FIRST_BODY = "Sky is the green grass . what is yellow grass\nthe yellow green grass is blue"
FIRST_SECTION = "Green Grass\nthe green grass is yellow sun . sun green yellow grass is the sky"


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("context")
    (root / "wiki.txt").write_text(WIKITEXT)
    write_tiny_encoder(root / "bert", positions=64)
    for name, pooling in (("st", "mean"), ("st-cls", "cls")):
        modules = [Transformer(str(root / "bert")), Pooling(32, pooling_mode=pooling), Normalize()]
        SentenceTransformer(modules=modules, device="cpu").save(str(root / name))
    return root


def test_articles_name_themselves_only_on_their_title_line(workspace):
    first, second = read_titled_articles(workspace / "wiki.txt")
    assert (first.title, second.title) == ("Blue Sky", "Yellow Sun")
    assert first.text == f"Blue Sky\n{FIRST_BODY}\n{FIRST_SECTION}"
    assert second.text == "Yellow Sun\nwhat is the yellow sun . the grass is green"
    assert first.headings == ["", "Green Grass"] and first.section_starts == [0, first.text.index("Green Grass")]
    assert (
        first.heading_at(first.text.index("Green") - 1) == "" and first.heading_at(len(first.text) - 1) == "Green Grass"
    )


def test_each_window_past_the_first_is_asked_by_title_heading_and_its_own_words(workspace):
    articles = read_titled_articles(workspace / "wiki.txt")
    # W = 8: 6 tokens a window; the first article's 34 body tokens are 6 windows (the last of 4), the second's 12 two.
    # The words a query may draw (5 letters or more, not a window's first or last word): window 1 "grass . what is
    # yellow grass" has yellow; 2 "the yellow green grass is blue" yellow, green, grass; 3 "Green Grass\nthe green
    # grass is" Grass, green; 4 "yellow sun . sun green yellow" green; 5 "grass is the sky" none; the second
    # article's window 1 "sun . the grass is green" grass.
    task = build_context_passages(articles, tiny_tokenizer(), 8, 4096, 1)
    assert task.of_article == [range(0, 6), range(6, 8)]
    assert task.window_texts[1:6] == [
        "grass . what is yellow grass",
        "the yellow green grass is blue",
        "Green Grass\nthe green grass is",
        "yellow sun . sun green yellow",
        "grass is the sky",
    ]
    assert task.relevant == [[1], [2], [3], [4], [7]] and task.answers == [0, 0, 0, 0, 1]
    first, second, third, fourth, last = task.queries
    assert (first, fourth, last) == ("Blue Sky yellow", "Blue Sky Green Grass green", "Yellow Sun grass")
    assert second in {"Blue Sky yellow", "Blue Sky green", "Blue Sky grass"}
    assert third in {"Blue Sky Green Grass Grass", "Blue Sky Green Grass green"}
    # two words: only windows 2 and 3 have as many; --max-tokens 14 leaves the first article 12 body tokens
    assert build_context_passages(articles, tiny_tokenizer(), 8, 4096, 2).relevant == [[2], [3]]
    assert build_context_passages(articles, tiny_tokenizer(), 8, 14, 1).of_article == [range(0, 2), range(2, 4)]


def test_training_rows_ask_what_the_task_asks_in_documents_that_start_with_the_title(workspace):
    articles = read_titled_articles(workspace / "wiki.txt")
    # 16 tokens a document: [CLS], the 2-token title line, 2 windows of 6 tokens, [SEP]: the first article is 3
    # documents (its start, whose first window holds the title; then windows 2-3 and 4-5 after the title line)
    rows = build_training_rows(articles, tiny_tokenizer(), 8, 16, 1, True)
    assert rows.documents == [
        f"Blue Sky\n{FIRST_BODY.split(chr(10))[0]}",
        "Blue Sky\nthe yellow green grass is blue\nGreen Grass\nthe green grass is",
        "Blue Sky\nthe yellow green grass is blue\nGreen Grass\nthe green grass is",
        "Blue Sky\nyellow sun . sun green yellow grass is the sky",
        articles[1].text,
    ]
    assert rows.labels == [[1, 1], [3, 0], [3, 1], [3, 0], [1, 1]]
    assert rows.queries == build_context_passages(articles, tiny_tokenizer(), 8, 4096, 1).queries
    assert len(rows.window_texts) == 8
    plain = build_training_rows(articles, tiny_tokenizer(), 8, 16, 1, False)
    assert plain.queries == [query.split()[-1] for query in rows.queries]
    with pytest.raises(UsageError, match=r"^--document-tokens 9 holds no window of 8 tokens after the title line"):
        build_training_rows(articles, tiny_tokenizer(), 8, 9, 1, True)


SHARED_WIKITEXT = Path(__file__).resolve().parents[2] / "shared" / "text" / "wikitext-2"


@pytest.mark.skipif(not SHARED_WIKITEXT.is_dir(), reason="../shared/text/wikitext-2 is absent")
def test_the_real_files_give_the_documented_counts():
    from transformers import AutoTokenizer

    from tisa_hf import minilm_path

    tokenizer = AutoTokenizer.from_pretrained(minilm_path())
    test = read_titled_articles(SHARED_WIKITEXT / "test.txt")
    counts = {}
    for window in (128, 256, 512):
        task = build_context_passages(test, tokenizer, window, 32768, 3)
        counts[window] = (len(task.window_texts), len(task.queries))
    assert (len(test), counts) == (51, {128: (1471, 1417), 256: (740, 687), 512: (381, 329)})
    rows = build_training_rows(read_titled_articles(SHARED_WIKITEXT / "valid.txt"), tokenizer, 128, 512, 3, True)
    assert (len(rows.queries), len(set(rows.documents)), len(rows.window_texts)) == (1359, 387, 1419)


def rows_batch(model, rows):
    """The rows as the trainer gives them to the loss: each column preprocessed, the labels a tensor."""
    return [model.preprocess(rows.queries), model.preprocess(rows.documents)], torch.tensor(rows.labels)


@pytest.mark.parametrize("in_batch", [True, False])
def test_the_loss_ranks_each_query_among_windows_pooled_from_whole_documents(workspace, in_batch):
    model = SentenceTransformer(str(workspace / "st"), device="cpu")
    articles = read_titled_articles(workspace / "wiki.txt")
    rows = build_training_rows(articles, tiny_tokenizer(), 8, 16, 1, True)
    features, labels = rows_batch(model, rows)
    loss = InSequenceLoss(model, 8, scale=20.0, in_batch=in_batch)(features, labels)["in_sequence"]

    bert, tokenizer = model[0].auto_model, tiny_tokenizer()
    with torch.no_grad():
        queries = torch.stack(
            [
                F.normalize(bert(**tokenizer(q, return_tensors="pt")).last_hidden_state[0].mean(0), dim=-1)
                for q in rows.queries
            ]
        )
        windows, owners, targets = [], [], []
        for row, (document, (first, number)) in enumerate(zip(rows.documents, rows.labels, strict=True)):
            states = bert(**tokenizer(document, return_tensors="pt")).last_hidden_state[0, first:-1]
            targets.append(len(windows) + number)
            for start in range(0, len(states), 6):
                windows.append(F.normalize(states[start : start + 6].mean(0), dim=-1))
                owners.append(row)
        scores = 20.0 * queries @ torch.stack(windows).T
        if not in_batch:
            scores[torch.tensor(owners)[None, :] != torch.arange(len(queries))[:, None]] = -torch.inf
        expected = F.cross_entropy(scores, torch.tensor(targets))
    torch.testing.assert_close(loss.detach(), expected, rtol=1e-5, atol=1e-5)


def train_argv(workspace, out, *extra):
    return [
        "--model", str(workspace / "st"), "--output-dir", str(out), "--train-text", str(workspace / "wiki.txt"),
        "--window-tokens", "8", "--document-tokens", "16", "--query-words", "1", "--train-batch-size", "3",
        "--learning-rate", "3e-3", "--warmup-ratio", "0", *extra,
    ]  # fmt: skip


def held_loss(model_path, rows) -> float:
    model = SentenceTransformer(str(model_path), device="cpu")
    with torch.no_grad():
        return InSequenceLoss(model, 8)(*rows_batch(model, rows))["in_sequence"].item()


def test_training_lowers_the_loss_and_saves_a_model_that_reloads_the_same(workspace, tmp_path, monkeypatch):
    saved = {}
    real_save = train.save_sentence_transformer

    def recording(model, folder):
        saved["embeddings"] = model.encode(["the green grass", "blue sky"], convert_to_tensor=True)
        return real_save(model, folder)

    monkeypatch.setattr(train, "save_sentence_transformer", recording)
    out = tmp_path / "run"
    record = train.run(context_train_parser().parse_args(train_argv(workspace, out, "--max-steps", "12", "--anchor")))
    assert (record["rows"], record["documents"], record["articles"], record["anchor_texts"]) == (5, 4, 2, 8)
    rows = build_training_rows(read_titled_articles(workspace / "wiki.txt"), tiny_tokenizer(), 8, 16, 1, True)
    assert held_loss(out, rows) < held_loss(workspace / "st", rows) - 0.1
    reloaded = SentenceTransformer(str(out), device="cpu").encode(
        ["the green grass", "blue sky"], convert_to_tensor=True
    )
    torch.testing.assert_close(reloaded, saved["embeddings"], rtol=0, atol=0)
    assert not (out / "checkpoints").exists() and json.loads((out / "context_train.json").read_text())["rows"] == 5
    with pytest.raises(UsageError, match=f"^{out} holds a finished run"):
        train.run(context_train_parser().parse_args(train_argv(workspace, out)))


def test_an_interrupted_run_resumes_to_the_uninterrupted_runs_weights(workspace, tmp_path, monkeypatch):
    steps = ["--max-steps", "4", "--checkpoint-steps", "2"]
    train.run(context_train_parser().parse_args(train_argv(workspace, tmp_path / "whole", *steps)))

    forward, calls = InSequenceLoss.forward, []

    def stopping(self, *args):
        calls.append(1)
        if len(calls) == 4:  # the fourth step, after the checkpoint of step 2
            raise KeyboardInterrupt
        return forward(self, *args)

    monkeypatch.setattr(InSequenceLoss, "forward", stopping)
    with pytest.raises(KeyboardInterrupt):
        train.run(context_train_parser().parse_args(train_argv(workspace, tmp_path / "cut", *steps)))
    monkeypatch.setattr(InSequenceLoss, "forward", forward)
    assert (tmp_path / "cut" / "checkpoints" / "checkpoint-2").is_dir()
    with pytest.raises(UsageError, match="interrupted run of other settings \\(learning_rate\\); rerun with its"):
        train.run(
            context_train_parser().parse_args(
                [*train_argv(workspace, tmp_path / "cut", *steps), "--learning-rate", "1e-3"]
            )
        )
    record = train.run(context_train_parser().parse_args(train_argv(workspace, tmp_path / "cut", *steps)))
    assert Path(record["resumed_from"]).name == "checkpoint-2"
    whole, cut = (SentenceTransformer(str(tmp_path / name), device="cpu") for name in ("whole", "cut"))
    for (name, value), other in zip(whole.state_dict().items(), cut.state_dict().values(), strict=True):
        torch.testing.assert_close(other, value, msg=name)


def test_bad_requests_fail_in_one_line_before_any_model_loads(workspace, tmp_path, monkeypatch):
    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(train, "SentenceTransformer", no_loading)
    cases = {
        ("--model", str(workspace / "bert")): f"--model {workspace / 'bert'} is not a sentence-transformers folder",
        ("--model", str(workspace / "st-cls")): f"{workspace / 'st-cls'} embeds with a Pooling module",
        ("--document-tokens", "65"): "--document-tokens 65 is longer than",
        ("--train-batch-size", "1"): "--negatives in-batch needs 2 or more documents a batch",
        ("--query-words", "9"): "No window of the training text has 9 words",
        ("--warmup-ratio", "1"): r"--warmup-ratio is a share of the steps, in \[0, 1\); got 1.0.",
    }
    for extra, message in cases.items():
        with pytest.raises(UsageError, match=f"^{message}"):
            train.run(context_train_parser().parse_args(train_argv(workspace, tmp_path / "bad", *extra)))


def test_the_task_runs_every_system_on_the_runner(workspace, tmp_path):
    tiny = str(workspace / "st")
    argv = [
        "bm25", f"chunk:{tiny}", f"interp:{tiny}", f"late:interp:{tiny}", f"hybrid:bm25+interp:{tiny}",
        "--paired", f"chunk:{tiny}", "--out", str(tmp_path), "--data", str(workspace / "wiki.txt"),
        "--tokenizer", tiny, "--window-tokens", "8", "--query-words", "1", "--bootstrap", "100",
    ]  # fmt: skip
    record = run_task(context_passages_parser().parse_args(argv))
    assert (record["settings"]["windows"], record["settings"]["queries"], record["settings"]["articles"]) == (8, 5, 2)
    # within its article, BM25 ranks the one window holding the query's drawn word alone first, where it is alone
    for name, result in record["results"].items():
        assert set(result) >= {"across", "within"}, name
        assert 0 < result["within"]["ndcg_at_10"] <= 1 and result["within"]["recall_at_10"] == 1.0
    with pytest.raises(UsageError, match=r"^--window-tokens 2: a window needs 3 tokens"):
        run_task(context_passages_parser().parse_args([*argv, "--window-tokens", "2"]))
