"""`tisa-hf adapt` for embeddings: the embedding objective against a direct computation, and the
sentence-transformers model that adapting a sentence-transformers base writes (its reading limit, its pipeline,
and that it is still a checkpoint `tisa-hf glue` fine-tunes)."""

from __future__ import annotations

import json
import random

import pytest
import torch
import torch.nn.functional as F
from embedding_fixtures import direct_embedding
from transformers import AutoModel, AutoTokenizer

import tisa_hf
from tests.fixtures import WORDS, tiny_config, write_rte_tsv, write_tiny_model, write_wikitext
from tisa_hf.adapt import adapt_task as adapt_run
from tisa_hf.adapt.arguments import ADAPT_ARGUMENTS
from tisa_hf.adapt.objectives import EVAL_SPAN_SEED, EmbeddingObjective, span_queries
from tisa_hf.commands.cli import entry
from tisa_hf.finetune import push
from tisa_hf.finetune.arguments import parse_arguments
from tisa_hf.finetune.glue.options import GLUE_ARGUMENTS

pytest.importorskip("sentence_transformers")
from sentence_transformers import SentenceTransformer  # noqa: E402
from sentence_transformers.sentence_transformer.modules import Normalize, Pooling, Transformer  # noqa: E402

adapt_main = entry("adapt")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    """The tiny BERT of the adapt tests (64 positions), as a transformers folder and as a sentence-transformers
    model (mean pooling, normalised), and a text."""
    root = tmp_path_factory.mktemp("adapt-st")
    write_tiny_model(root / "bert")
    write_wikitext(root / "text.txt")
    write_rte_tsv(root / "RTE")
    modules = [Transformer(str(root / "bert")), Pooling(32, pooling_mode="mean"), Normalize()]
    SentenceTransformer(modules=modules, device="cpu").save(str(root / "st"))
    modules = [Transformer(str(root / "bert")), Pooling(32, pooling_mode="cls")]
    SentenceTransformer(modules=modules, device="cpu").save(str(root / "st-cls"))
    return root


def adapt_argv(workspace, output_dir, *extra, model="st"):
    return [
        "--model", str(workspace / model), "--train-text", str(workspace / "text.txt"), "--output-dir",
        str(output_dir), "--lengths", "16", "96", "--max-steps", "4", "--train-batch-size", "4",
        "--eval-batch-size", "8", "--tisa.num_kernels", "2", "--tisa.init", "random", "--no-tracking",
        "--checkpoint-steps", "0", "--objective", "embed", "--train", "all", *extra,
    ]  # fmt: skip


def run_adapt(argv):
    return adapt_run.run(*parse_arguments(ADAPT_ARGUMENTS, argv, prog="test"))


@torch.no_grad()
def embedding(model, input_ids):
    return F.normalize(model(input_ids=input_ids).last_hidden_state.mean(1), dim=-1)


@torch.no_grad()
def token_distance(student, teacher, input_ids):
    """Per block, the mean over every layer after the embeddings and every token of 1 - cosine."""
    pairs = zip(
        student(input_ids, output_hidden_states=True).hidden_states[1:],
        teacher(input_ids, output_hidden_states=True).hidden_states[1:],
        strict=True,
    )
    return torch.stack([1 - F.cosine_similarity(s, t, dim=-1) for s, t in pairs]).mean((0, 2))


def test_embedding_loss_is_one_minus_cosine_to_the_teachers_embedding_or_its_chunk_average():
    teacher = AutoModel.from_config(tiny_config("bert")).eval()  # 40 positions
    # weights of their own: mean-pooled embeddings of a random model and of its own TISA copy nearly coincide
    tisa = tisa_hf.TisaConfig(num_kernels=2, mode="replace", init="random")
    student = AutoModel.from_config(tisa_hf.tisa_model_config(tiny_config("bert"), tisa)).eval()
    whole = torch.randint(5, 99, (3, 40))
    long = torch.randint(5, 99, (3, 90))
    whole[:, 0] = long[:, 0] = 2  # [CLS] and [SEP], which every chunk repeats
    whole[:, -1] = long[:, -1] = 3

    expected = 1 - (embedding(student, whole) * embedding(teacher, whole)).sum(-1)
    output = EmbeddingObjective(student, teacher, table=40)(whole)
    torch.testing.assert_close(output.sums, expected, rtol=1e-5, atol=1e-6)
    assert output.loss.item() == pytest.approx(expected.mean().item(), rel=1e-5) and expected.min() > 1e-3
    assert output.counts.tolist() == [1, 1, 1]

    # 88 tokens between [CLS] and [SEP]: chunks of 38, 38 and 12, each read as [CLS] chunk [SEP]
    body = long[:, 1:-1]
    chunks = [torch.cat([long[:, :1], body[:, start : start + 38], long[:, -1:]], 1) for start in (0, 38, 76)]
    assert [chunk.shape[1] for chunk in chunks] == [40, 40, 14]
    target = F.normalize(torch.stack([embedding(teacher, chunk) for chunk in chunks]).mean(0), dim=-1)
    expected_long = 1 - (embedding(student, long) * target).sum(-1)
    output = EmbeddingObjective(student, teacher, table=40)(long)
    torch.testing.assert_close(output.sums, expected_long, rtol=1e-5, atol=1e-6)

    weighted = EmbeddingObjective(student, teacher, table=40, token_weight=0.5, layers="all")
    added = 0.5 * token_distance(student, teacher, whole)
    torch.testing.assert_close(weighted(whole).sums, expected + added, rtol=1e-5, atol=1e-6)
    assert added.min() > 1e-3
    torch.testing.assert_close(weighted(long).sums, expected_long)  # no token states of the teacher to match


def test_span_queries_are_a_span_of_the_body_between_the_blocks_own_cls_and_sep():
    blocks = torch.arange(3 * 20).view(3, 20)
    queries = span_queries(blocks, 6, torch.Generator().manual_seed(1))
    assert queries.shape == (3, 8)
    for block, query in zip(blocks, queries, strict=True):
        start = int(query[1] - block[0])
        assert 1 <= start <= 20 - 1 - 6 and query[0] == block[0] and query[-1] == block[-1]
        assert torch.equal(query[1:-1], block[start : start + 6])
    starts = {int(span_queries(blocks[:1], 18, torch.Generator().manual_seed(seed))[0, 1]) for seed in range(5)}
    assert starts == {1}  # a span of the whole body has one place
    torch.manual_seed(7)
    drawn = span_queries(blocks, 6, None)  # training: the global RNG, checkpointed with the step
    torch.manual_seed(7)
    assert torch.equal(drawn, span_queries(blocks, 6, None))


def test_span_retrieval_adds_the_cross_entropy_of_each_span_finding_its_block():
    teacher = AutoModel.from_config(tiny_config("bert")).eval()
    tisa = tisa_hf.TisaConfig(num_kernels=2, mode="replace", init="random")
    student = AutoModel.from_config(tisa_hf.tisa_model_config(tiny_config("bert"), tisa)).eval()
    blocks = torch.randint(5, 99, (4, 40))
    blocks[:, 0], blocks[:, -1] = 2, 3
    plain = EmbeddingObjective(student, teacher, table=40)(blocks).sums
    output = EmbeddingObjective(student, teacher, table=40, span_weight=0.5, span_tokens=10).eval()(blocks)

    queries = span_queries(blocks, 10, torch.Generator().manual_seed(EVAL_SPAN_SEED))  # evaluation: fixed spans
    scores = 20 * embedding(student, queries) @ embedding(student, blocks).T
    expected = -scores.log_softmax(-1).diagonal()
    assert expected.min() > 1e-3
    torch.testing.assert_close(output.sums, plain + 0.5 * expected, rtol=1e-5, atol=1e-5)
    assert output.loss.item() == pytest.approx((plain + 0.5 * expected).mean().item(), rel=1e-5)


def test_an_adapted_sentence_transformer_reads_its_stated_length_and_fine_tunes(workspace, tmp_path):
    output = tmp_path / "adapted"
    spans = ("--embed-span-weight", "0.5", "--embed-span-tokens", "8")
    record = run_adapt(
        adapt_argv(workspace, output, "--embedding-max-length", "200", "--embed-token-weight", "1", *spans)
    )
    adaptation = record["adaptation"]
    assert adaptation["objective"] == "embed" and adaptation["teacher_table"] == 64
    assert adaptation["max_seq_length"] == 200 and adaptation["embed_token_weight"] == 1.0
    assert (adaptation["embed_span_weight"], adaptation["embed_span_tokens"]) == (0.5, 8)
    assert set(record["metrics"]["held_out_loss"]) == {"16", "96"}
    assert json.loads((output / "sentence_bert_config.json").read_text())["max_seq_length"] == 200
    assert json.loads((output / "tokenizer_config.json").read_text())["model_max_length"] == 200

    model = SentenceTransformer(str(output), device="cpu")
    assert [type(module).__name__ for module in model] == ["Transformer", "Pooling", "Normalize"]
    assert model.max_seq_length == 200
    rng = random.Random(0)
    text = " ".join(rng.choice(WORDS) for _ in range(150))  # 152 tokens, past the 64-position table
    tokenizer = AutoTokenizer.from_pretrained(output)
    ids = tokenizer(text)["input_ids"]
    assert len(ids) == 152
    adapted = AutoModel.from_pretrained(output).eval()
    assert tisa_hf.tisa_config_of(adapted).mode == "replace"
    encoded = model.encode(text, convert_to_tensor=True)
    torch.testing.assert_close(encoded, direct_embedding(adapted, ids), rtol=1e-5, atol=1e-6)
    assert (encoded - direct_embedding(adapted, ids[:63] + ids[-1:])).abs().max() > 1e-3  # not cut at the table

    from tisa_hf.finetune.glue.task import run

    glue_argv = [
        "--model", str(output), "--data-dir", str(workspace), "--task", "rte", "--output-dir", str(tmp_path / "rte"),
        "--max-steps", "2", "--train-batch-size", "8", "--max-seq-length", "32", "--no-tracking",
    ]  # fmt: skip
    glue = run(*parse_arguments(GLUE_ARGUMENTS, glue_argv, prog="test"))
    assert glue["steps"] == 2 and glue["tisa"] == record["tisa"]
    assert glue["adapted"] == {"from": str(workspace / "st"), "objective": "embed", "train": "all"}

    card = push.build_model_card(output, repo_id="someone/adapted").text
    assert (
        "the mean-pooled embedding of each block matched to the teacher's by 1 - cosine (beyond 64 tokens, the mean "
        "of the teacher's embeddings of 64-token chunks), plus 1.0 times the last layer's hidden states matched to "
        "the teacher's by 1 - cosine per token (blocks of at most 64 tokens), plus 0.5 times span retrieval (one "
        "span of 8 tokens from each block finds its block among the micro-batch's by cosine, cross-entropy)."
    ) in card


def test_the_reading_limit_defaults_to_the_longest_length_and_a_plain_base_writes_no_pipeline(
    workspace, tmp_path, capsys
):
    add = ("--objective", "distill", "--train", "kernels", "--lengths", "16", "32", "--tisa.mode", "add")
    assert adapt_main(adapt_argv(workspace, tmp_path / "st", *add)) == 0
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"The sentence-transformers model in {tmp_path / 'st'} reads 32 tokens per input (the longest --lengths, "
        "by default); --embedding-max-length N sets another length."
    )
    record = json.loads((tmp_path / "st" / "metrics.json").read_text())
    assert record["adaptation"]["max_seq_length"] == 32
    assert SentenceTransformer(str(tmp_path / "st"), device="cpu").max_seq_length == 32
    card = (tmp_path / "st" / "README.md").read_text()
    assert f"`{workspace / 'st'}` adapted by `tisa-hf adapt` to translation-invariant self-attention" in card
    assert "It reads the first **32 tokens** of each input" in card and "| mode | `add` |" in card
    assert "## Adaptation\n\nDistilled from the unpatched" in card and "| 32 | 2 |" in card
    record = run_adapt(adapt_argv(workspace, tmp_path / "plain", *add, model="bert"))
    assert "max_seq_length" not in record["adaptation"]
    assert not (tmp_path / "plain" / "modules.json").exists()
    assert not (tmp_path / "plain" / "sentence_bert_config.json").exists()
    limit = AutoTokenizer.from_pretrained(workspace / "bert").model_max_length
    assert AutoTokenizer.from_pretrained(tmp_path / "plain").model_max_length == limit


def test_multi_vector_writes_the_adapted_encoder_as_a_multi_vector_encoder_beside_the_run(workspace, tmp_path, capsys):
    from sentence_transformers import MultiVectorEncoder

    options = ("--objective", "distill", "--train", "kernels", "--lengths", "16", "32", "--multi-vector")
    assert adapt_main(adapt_argv(workspace, tmp_path / "run", *options, model="bert")) == 0
    folder = tmp_path / "run" / "multi-vector"
    assert capsys.readouterr().out.splitlines()[-1] == (
        f"The multi-vector model (one vector a token, mean MaxSim) is in {folder}: MultiVectorEncoder(path) after "
        "import tisa_hf."
    )
    model = MultiVectorEncoder(str(folder), device="cpu")
    assert (model.similarity_fn_name, model[0].document_length) == ("meanmaxsim", 32_768)
    assert "adapted by `tisa-hf adapt` to" in (folder / "README.md").read_text()
    text = " ".join(WORDS * 12)
    ids = AutoTokenizer.from_pretrained(tmp_path / "run")(text)["input_ids"]
    assert len(ids) > 64  # past the table
    with torch.no_grad():
        states = AutoModel.from_pretrained(tmp_path / "run")(input_ids=torch.tensor([ids])).last_hidden_state[0]
    torch.testing.assert_close(model.encode_document(text), F.normalize(states[1:-1], dim=-1), rtol=0, atol=1e-5)


BAD_REQUESTS = {
    "add mode beyond the table": (
        ("--tisa.mode", "add", "--lengths", "16", "32", "--embedding-max-length", "65"),
        "--embedding-max-length 65 is longer than {st}'s position table (64 positions), which TISA mode='add' "
        "keeps; ask for at most 64, or use --tisa.mode replace, which reads any length.",
    ),
    "a limit for a plain base": (
        ("--embedding-max-length", "200", "--model", "{bert}"),
        "--embedding-max-length sets how many tokens the sentence-transformers model written for a "
        "sentence-transformers base reads, and {bert} is not one (no modules.json); leave it out.",
    ),
    "embed through cls pooling": (
        (
            "--model",
            "{st_cls}",
        ),
        "{st_cls} embeds with a Pooling module '1_Pooling' that is not mean pooling or normalisation, and "
        "--objective embed trains the mean-pooled embedding; adapt it with --objective distill.",
    ),
    "embed with a negative weight": (("--embed-token-weight", "-1"), "--embed-token-weight must be at least 0"),
    "span retrieval in a micro-batch of one": (
        ("--embed-span-weight", "1", "--embed-span-tokens", "8", "--gradient-accumulation-steps", "4"),
        "--embed-span-weight ranks each span's block among the other blocks of its micro-batch, and a micro-batch "
        "here holds 1 (--train-batch-size 4 / --gradient-accumulation-steps 4 / 1 process(es)); use fewer "
        "accumulation steps or a larger batch.",
    ),
    "spans longer than the shortest block": (
        ("--embed-span-weight", "1", "--embed-span-tokens", "15"),
        "--embed-span-tokens 15 does not fit inside the shortest blocks, 16 tokens with [CLS] and [SEP]; use at most "
        "14.",
    ),
    "span retrieval without the embedding objective": (
        ("--embed-span-weight", "1", "--objective", "distill", "--lengths", "16"),
        "--embed-span-weight is a term of --objective embed, and the objective is distill; add --objective embed or "
        "leave it out.",
    ),
}


@pytest.mark.parametrize("case", BAD_REQUESTS, ids=list(BAD_REQUESTS))
def test_bad_requests_fail_before_any_model_loads(case, workspace, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(adapt_run, "build_objective", lambda *args: pytest.fail("a model was loaded"))
    extra, message = BAD_REQUESTS[case]
    names = {"st": workspace / "st", "bert": workspace / "bert", "st_cls": workspace / "st-cls"}
    assert adapt_main(adapt_argv(workspace, tmp_path / "run", *(value.format(**names) for value in extra))) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and message.format(**names) in error
    assert not (tmp_path / "run").exists()
