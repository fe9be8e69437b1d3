"""`tisa-hf adapt`: text packing, the objectives against reference computations, the curriculum, exact resume,
the refused requests and what an adapted model is good for (loading, GLUE fine-tuning, the model card)."""

import json
import logging
import os
import shutil
import subprocess
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from safetensors.torch import load_file
from transformers import AutoModel, AutoModelForMaskedLM, AutoTokenizer

import tisa_hf
from tests.fixtures import tiny_config, two_process_launch, write_rte_tsv, write_tiny_model, write_wikitext
from tisa_hf.adapt import adapt_task as adapt_run
from tisa_hf.adapt.arguments import ADAPT_ARGUMENTS
from tisa_hf.adapt.objectives import DistillationObjective, MaskedLMObjective
from tisa_hf.adapt.plan import curriculum_steps
from tisa_hf.commands.cli import entry
from tisa_hf.common.model_cards import adaptation_section
from tisa_hf.common.text import (
    block_count,
    mask_blocks,
    pack_blocks,
    read_articles,
    split_articles,
    tokenize_articles,
)
from tisa_hf.finetune import push, trainer
from tisa_hf.finetune.arguments import parse_arguments
from tisa_hf.finetune.glue.options import GLUE_ARGUMENTS

adapt_main = entry("adapt")  # `tisa-hf adapt`

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("adapt")
    write_tiny_model(root / "bert")
    write_tiny_model(root / "bert-mlm-dropout", dropout=0.1, masked_lm=True)
    write_wikitext(root / "text.txt")
    write_rte_tsv(root / "RTE")
    return root


def adapt_argv(workspace, output_dir, *extra, model="bert"):
    return [
        "--model", str(workspace / model), "--train-text", str(workspace / "text.txt"), "--output-dir",
        str(output_dir), "--lengths", "16", "32", "--max-steps", "4", "--train-batch-size", "4",
        "--eval-batch-size", "8", "--tisa.num_kernels", "2", "--tisa.init", "random", "--no-tracking",
        "--logging-steps", "1", "--checkpoint-steps", "0", *extra,
    ]  # fmt: skip


def run_adapt(argv):
    return adapt_run.run(*parse_arguments(ADAPT_ARGUMENTS, argv, prog="test"))


def test_articles_split_at_titles_and_blocks_are_full(workspace):
    articles = read_articles(workspace / "text.txt")
    assert len(articles) == 10  # section headings (" = = x = = ") do not start an article
    assert articles[0].startswith("w24 w26 w2 ")  # the title's words, then the text, markers dropped
    train, held_out = split_articles(articles, 0.25)
    assert (train, held_out) == (articles[:7], articles[7:])  # ceil(2.5) whole articles held out
    tokenizer = AutoTokenizer.from_pretrained(workspace / "bert")
    documents = tokenize_articles(articles[:2], tokenizer)
    assert tokenizer.unk_token_id in documents[0] and "@" not in tokenizer.decode(documents[0])
    blocks = pack_blocks(documents, 16, tokenizer)
    stream = documents[0] + [tokenizer.sep_token_id] + documents[1] + [tokenizer.sep_token_id]
    assert blocks.shape == (len(stream) // 14, 16)
    assert (blocks[:, 0] == tokenizer.cls_token_id).all() and (blocks[:, -1] == tokenizer.sep_token_id).all()
    assert blocks[:, 1:-1].flatten().tolist() == stream[: blocks.shape[0] * 14]


def test_plain_text_without_headings_adapts_on_its_paragraphs(workspace, tmp_path):
    lines = (workspace / "text.txt").read_text().splitlines()
    plain = tmp_path / "plain.txt"
    plain.write_text("\n".join(line for line in lines if not line.startswith(" = ")))
    paragraphs = [line.strip() for line in lines if line.strip() and not line.startswith(" = ")]
    assert read_articles(plain) == paragraphs and len(paragraphs) == 30
    argv = adapt_argv(workspace, tmp_path / "run", "--max-eval-blocks", "2")
    argv[argv.index("--train-text") + 1] = str(plain)
    record = run_adapt(argv)
    assert record["adaptation"]["articles"] == {"train": 27, "held_out": 3}  # whole paragraphs held out
    assert set(record["metrics"]["held_out_loss"]) == {"16", "32"}


def copy_of(teacher, tisa):
    """The teacher's weights in a TISA model built by its class (as `from_pretrained` builds the student)."""
    model = AutoModel.from_config(tisa_hf.tisa_model_config(teacher.config, tisa))
    missing, unexpected = model.load_state_dict(teacher.state_dict(), strict=False)
    assert not unexpected and all(".tisa." in f".{key}" for key in missing)
    return model.eval()


@torch.no_grad()
def reference_distance(student, teacher, input_ids, layers, loss):
    """Mean over the matched layers of the mean per-token distance, from the models' own hidden states."""
    first = 1 if layers == "all" else -1  # every layer after the embeddings, or the last
    pairs = zip(
        student(input_ids, output_hidden_states=True).hidden_states[first:],
        teacher(input_ids, output_hidden_states=True).hidden_states[first:],
        strict=True,
    )
    if loss == "cosine":
        return torch.stack([(1 - F.cosine_similarity(s, t, dim=-1)).mean() for s, t in pairs]).mean().item()
    return torch.stack([F.mse_loss(s, t) for s, t in pairs]).mean().item()


def test_distill_loss_is_zero_when_the_student_is_the_teacher(model_type):
    teacher = AutoModel.from_config(tiny_config(model_type)).eval()
    # TISA in add mode with f = 0 leaves the model as it was: a patched student that equals its teacher.
    same = copy_of(teacher, tisa_hf.TisaConfig(num_kernels=2, mode="add", init="zeros"))
    other = copy_of(teacher, tisa_hf.TisaConfig(num_kernels=2, mode="replace", init="random"))
    input_ids = torch.randint(5, 99, (3, 12))
    for layers in ("last", "all"):
        for loss in ("cosine", "mse"):
            output = DistillationObjective(same, teacher, 40, layers, loss)(input_ids)
            assert output.loss.item() == pytest.approx(0.0, abs=1e-6)
            assert output.counts.tolist() == [12, 12, 12]
            output = DistillationObjective(other, teacher, 40, layers, loss)(input_ids)
            expected = reference_distance(other, teacher, input_ids, layers, loss)
            assert output.loss.item() == pytest.approx(expected, rel=1e-5) and expected > 1e-3
            assert output.sums.sum().item() / output.counts.sum().item() == pytest.approx(expected, rel=1e-5)


@pytest.mark.parametrize("model_type", ["bert", "roberta", "albert", "xlm-roberta"])
def test_masked_only_logits_give_the_full_logit_loss(model_type, workspace):
    model = AutoModelForMaskedLM.from_config(tiny_config(model_type)).eval()
    tokenizer = AutoTokenizer.from_pretrained(workspace / "bert")  # only its [MASK] token is used here
    objective = MaskedLMObjective(model, tokenizer)
    input_ids = torch.randint(5, 99, (3, 20))
    labels = torch.full_like(input_ids, -100)
    positions = torch.rand(input_ids.shape) < 0.3
    labels[positions] = input_ids[positions]
    rows = []
    handle = objective.head.register_forward_hook(lambda _m, args, _o: rows.append(args[0].shape))
    with torch.no_grad():
        output = objective(input_ids, labels)
        handle.remove()
        full = model(input_ids=input_ids, labels=labels).loss
    assert output.loss.item() == pytest.approx(full.item(), rel=1e-5)
    assert rows == [torch.Size([int(positions.sum()), model.config.hidden_size])]  # only the masked states
    assert output.counts.tolist() == positions.sum(-1).tolist()


def test_training_masks_are_the_collators_standard_masking(workspace):
    tokenizer = AutoTokenizer.from_pretrained(workspace / "bert")
    blocks = pack_blocks(tokenize_articles(read_articles(workspace / "text.txt"), tokenizer), 64, tokenizer)
    masked, labels = mask_blocks(blocks, tokenizer, 0.15, seed=3)
    chosen = labels != -100
    assert not chosen[:, 0].any() and not chosen[:, -1].any()  # [CLS] and [SEP] are never masked
    assert chosen.float().mean().item() == pytest.approx(0.15, abs=0.03)
    assert (masked[chosen] == tokenizer.mask_token_id).float().mean().item() == pytest.approx(0.8, abs=0.08)
    assert torch.equal(labels[chosen], blocks[chosen]) and torch.equal(masked[~chosen], blocks[~chosen])
    again = mask_blocks(blocks, tokenizer, 0.15, seed=3)
    assert torch.equal(again[0], masked) and torch.equal(again[1], labels)


def test_curriculum_visits_the_lengths_in_order_with_equal_steps(workspace, tmp_path, monkeypatch):
    assert curriculum_steps(7, 3) == [2, 2, 3]  # equal shares, the remainder to the longest
    assert curriculum_steps(6, 3) == [2, 2, 2]
    seen = []
    forward = DistillationObjective.forward

    def recording_forward(self, input_ids):
        if self.training:
            seen.append(input_ids.shape[1])
        return forward(self, input_ids)

    monkeypatch.setattr(DistillationObjective, "forward", recording_forward)
    argv = adapt_argv(workspace, tmp_path / "run", "--gradient-accumulation-steps", "2")
    argv[argv.index("--lengths") + 1 : argv.index("--max-steps") + 2] = ["8", "16", "32", "--max-steps", "7"]
    record = run_adapt(argv)
    assert seen == [8] * 4 + [16] * 4 + [32] * 6  # two micro-batches per step
    curriculum = record["adaptation"]["curriculum"]
    assert [(stage["length"], stage["steps"]) for stage in curriculum] == [(8, 2), (16, 2), (32, 3)]
    assert record["steps"] == 7


def test_distillation_trains_past_the_teachers_table_on_windowed_targets(workspace, tmp_path, monkeypatch):
    seen = []
    forward = DistillationObjective.forward

    def recording_forward(self, input_ids):
        output = forward(self, input_ids)
        seen.append((self.training, input_ids.shape[1], output.counts.tolist()))
        return output

    monkeypatch.setattr(DistillationObjective, "forward", recording_forward)
    argv = adapt_argv(workspace, tmp_path / "run", "--eval-steps", "4")
    argv[argv.index("--lengths") + 1 : argv.index("--max-steps")] = ["32", "96"]
    record = run_adapt(argv)
    adaptation = record["adaptation"]
    assert (adaptation["teacher_table"], adaptation["teacher_window_stride"]) == (64, 31)
    assert [stage["length"] for stage in adaptation["curriculum"]] == [32, 96]
    assert [length for training, length, _ in seen if training] == [32, 32, 96, 96]
    assert all(counts == [94] * len(counts) for _, length, counts in seen if length == 96)  # the body tokens
    assert set(record["metrics"]["held_out_loss"]) == {"32", "96"}
    assert "; beyond 64 tokens, the teacher's states read in overlapping 64-token windows 31 tokens apart" in (
        adaptation_section(record)
    )


@pytest.mark.parametrize(
    "objective",
    [
        ("--objective", "distill"),
        ("--objective", "mlm", "--train", "all"),
        ("--objective", "embed", "--train", "all", "--lengths", "16", "96"),  # past the 64-position table
    ],
    ids=["distill", "mlm", "embed"],
)
def test_resume_after_a_kill_gives_the_same_model(workspace, tmp_path, monkeypatch, caplog, objective):
    common = (*objective, "--max-steps", "8", "--checkpoint-steps", "3", "--eval-steps", "4")
    model = "bert-mlm-dropout"  # dropout and (for mlm) masking: both must be restored to match
    with caplog.at_level(logging.WARNING):
        full = run_adapt(adapt_argv(workspace, tmp_path / "full", *common, model=model))
    assert not [record for record in caplog.records if record.levelno >= logging.WARNING]  # tied weights: quiet

    save = trainer.save_checkpoint

    def die_at_step_6(accelerator, output_dir, state):
        if state.step == 6:
            raise KeyboardInterrupt  # killed after step 6, past the curriculum's switch at step 4
        save(accelerator, output_dir, state)

    monkeypatch.setattr(trainer, "save_checkpoint", die_at_step_6)
    with pytest.raises(KeyboardInterrupt):
        run_adapt(adapt_argv(workspace, tmp_path / "killed", *common, model=model))
    monkeypatch.setattr(trainer, "save_checkpoint", save)
    assert sorted(path.name for path in (tmp_path / "killed" / "checkpoints").iterdir()) == ["step-3"]
    torch.manual_seed(12345)  # the resumed run must restore the RNG, not inherit it
    resumed = run_adapt(adapt_argv(workspace, tmp_path / "killed", *common, "--resume", model=model))

    assert resumed["history"] == full["history"]
    full_weights, resumed_weights = (
        load_file(tmp_path / "full" / "model.safetensors"),
        load_file(tmp_path / "killed" / "model.safetensors"),
    )
    assert full_weights.keys() == resumed_weights.keys()
    assert all(torch.equal(full_weights[name], resumed_weights[name]) for name in full_weights)
    other = run_adapt(adapt_argv(workspace, tmp_path / "other", *common, "--seed", "2", model=model))
    assert other["history"] != full["history"]  # the comparison above is not vacuous


BAD_INPUTS = {
    "empty text": ((), "is empty; give a file of plain text"),
    "binary text": ((), "binary.txt is not UTF-8 text (byte 0x80 at offset 0); give a plain-text file"),
    "text too short": (
        ("--lengths", "16", "48", "--train-batch-size", "32"),
        "is too short for --lengths 48: its training articles give {blocks} block(s) of 48 tokens, fewer than one "
        "batch of 32 (--train-batch-size); use a longer text, shorter lengths or a smaller batch.",
    ),
    "mlm without a head": (
        ("--objective", "mlm"),
        "--objective mlm needs an MLM head and {model} has none (its config names BertModel); fit one first with "
        "`tisa-hf adapt --model {model} --objective mlm --train head --output-dir HEAD_DIR`",
    ),
    "add mode beyond the table": (
        ("--objective", "mlm", "--tisa.mode", "add", "--lengths", "16", "96"),
        "--lengths has 96 tokens but {model}'s position table holds 64, which TISA mode='add' keeps; use "
        "--tisa.mode replace, or lengths <= 64.",
    ),
    "distill beyond the table in add mode": (
        ("--tisa.mode", "add", "--lengths", "16", "96"),
        "--lengths has 96 tokens but {model}'s position table holds 64, which TISA mode='add' keeps; use "
        "--tisa.mode replace, or lengths <= 64.",
    ),
    "no kernels to train": (("--tisa.num_kernels", "0"), "--train kernels, but num_kernels is 0"),
}


@pytest.mark.parametrize("case", BAD_INPUTS, ids=list(BAD_INPUTS))
def test_bad_inputs_fail_before_any_model_loads(case, workspace, tmp_path, monkeypatch, capsys):
    extra, message = BAD_INPUTS[case]
    model = "bert-mlm-dropout" if "add mode" in case else "bert"
    text = workspace / "text.txt"
    if case == "empty text":
        text = tmp_path / "empty.txt"
        text.write_text("\n \n")
    if case == "binary text":
        text = tmp_path / "binary.txt"
        text.write_bytes(bytes(range(128, 256)))

    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(adapt_run, "build_objective", no_loading)
    output = tmp_path / "run"
    argv = adapt_argv(workspace, output, model=model)
    argv[argv.index("--train-text") + 1] = str(text)
    assert adapt_main([*argv, *extra]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.startswith("tisa-hf adapt: ")
    tokenizer = AutoTokenizer.from_pretrained(workspace / "bert")
    train, _ = split_articles(read_articles(workspace / "text.txt"), 0.1)
    blocks = block_count(tokenize_articles(train, tokenizer), 48)
    assert 0 < blocks < 32
    assert message.format(model=workspace / model, blocks=blocks) in error
    assert not output.exists()  # not even run_config.yaml


def test_adapted_model_loads_fine_tunes_and_has_a_card(workspace, tmp_path):
    output = tmp_path / "adapted"
    record = run_adapt(adapt_argv(workspace, output, "--distill-layers", "all", "--distill-loss", "mse"))
    assert record["tisa"]["mode"] == "replace" and record["adaptation"]["distill_loss"] == "mse"
    assert json.loads((output / "metrics.json").read_text())["adaptation"] == record["adaptation"]
    adapted = AutoModel.from_pretrained(output)
    assert tisa_hf.tisa_config_of(adapted) == tisa_hf.TisaConfig(num_kernels=2, mode="replace", init="random")
    saved = load_file(output / "model.safetensors")
    assert torch.equal(adapted.tisa.amplitude.detach(), saved["tisa.amplitude"])
    original = load_file(workspace / "bert" / "model.safetensors")
    assert torch.equal(
        saved["encoder.layer.0.attention.self.query.weight"], original["encoder.layer.0.attention.self.query.weight"]
    )  # --train kernels: the weights did not move
    assert not torch.equal(saved["tisa.amplitude"], AutoModel.from_pretrained(
        workspace / "bert", tisa=tisa_hf.TisaConfig(num_kernels=2, mode="replace", init="random")
    ).tisa.amplitude.detach())  # fmt: skip

    from tisa_hf.finetune.glue.task import run

    # Only what from_pretrained reads, as a download from the Hub would hold: the provenance is in config.json.
    weights_only = tmp_path / "weights-only"
    weights_only.mkdir()
    for path in output.iterdir():
        if path.name != "metrics.json" and path.is_file():
            shutil.copy(path, weights_only)
    assert json.loads((weights_only / "config.json").read_text())["tisa_adapted"]["objective"] == "distill"
    glue = run(
        *parse_arguments(
            GLUE_ARGUMENTS,
            [
                "--model",
                str(weights_only),
                "--data-dir",
                str(workspace),
                "--task",
                "rte",
                "--output-dir",
                str(tmp_path / "rte"),
                "--max-steps",
                "2",
                "--train-batch-size",
                "8",
                "--max-seq-length",
                "32",
                "--no-tracking",
            ],  # fmt: skip
            prog="test",
        )
    )
    assert glue["steps"] == 2
    assert glue["tisa"] == record["tisa"]  # the checkpoint's TISA, though no --tisa flag was given
    assert glue["adapted"] == {"from": str(workspace / "bert"), "objective": "distill", "train": "kernels"}
    assert tisa_hf.tisa_config_of(AutoModel.from_pretrained(tmp_path / "rte")).mode == "replace"

    text = push.build_model_card(output, repo_id="someone/adapted").text
    assert "adapted to translation-invariant self-attention" in text
    assert "every layer's hidden states matched to the teacher's by the mean squared error per token" in text
    assert "Trained: the TISA kernels only" in text and "(9 articles; 1 held out)" in text
    held_out = record["metrics"]["held_out_loss"]
    assert f"| 16 | 2 | {record['adaptation']['curriculum'][0]['blocks']} | {held_out['16']:.4f} |" in text


def test_train_head_fits_only_a_head_that_mlm_adaptation_then_uses(workspace, tmp_path):
    head_dir = tmp_path / "head"
    argv = adapt_argv(workspace, head_dir, "--objective", "mlm", "--train", "head")
    argv = argv[: argv.index("--tisa.num_kernels")] + argv[argv.index("--tisa.init") + 2 :]
    record = run_adapt(argv)
    assert record["tisa"] is None and record["adaptation"]["train"] == "head"
    saved, original = load_file(head_dir / "model.safetensors"), load_file(workspace / "bert" / "model.safetensors")
    assert all(torch.equal(saved[f"bert.{name}"], original[name]) for name in original if "pooler" not in name)
    assert {name for name in saved if not name.startswith("bert.")} >= {"cls.predictions.transform.dense.weight"}

    # the fitted head makes masked-LM adaptation possible, here with blocks beyond the 64-position table
    longer = adapt_argv(workspace, tmp_path / "mlm", "--objective", "mlm", "--train", "all", model="bert")
    longer[longer.index("--model") + 1] = str(head_dir)
    longer[longer.index("--lengths") + 2] = "96"
    mlm = run_adapt(longer)
    assert [stage["length"] for stage in mlm["adaptation"]["curriculum"]] == [16, 96]
    assert set(mlm["metrics"]["held_out_loss"]) == {"16", "96"}
    assert AutoModelForMaskedLM.from_pretrained(tmp_path / "mlm").config.tisa.mode == "replace"


def test_finished_runs_are_not_overwritten(workspace, tmp_path, capsys):
    output = tmp_path / "done"
    output.mkdir()
    (output / "metrics.json").write_text("{}")
    assert adapt_main(adapt_argv(workspace, output)) == 2
    assert capsys.readouterr().err == (
        f"tisa-hf adapt: {output} holds a finished run (metrics.json); pass --overwrite-output-dir to train it again "
        "from scratch (its model and metrics are replaced), or choose another --output-dir.\n"
    )


def test_two_processes_match_one(workspace, tmp_path):
    """DDP sees only the student (the teacher is no submodule) and no parameter without a gradient (the pooler is
    frozen), or it would fail; both processes together take the same global batch as one."""
    if torch.cuda.is_available():
        pytest.skip("this test runs its two processes on CPU")
    argv = adapt_argv(workspace, tmp_path / "double", "--train", "all")
    command = [*two_process_launch("tisa_hf.commands.adapt"), *argv]
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "ACCELERATE_USE_CPU": "true"}
    completed = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=300)
    assert completed.returncode == 0, completed.stderr[-3000:]
    single = run_adapt(adapt_argv(workspace, tmp_path / "single", "--train", "all"))
    double = json.loads((tmp_path / "double" / "metrics.json").read_text())
    assert double["num_processes"] == 2 and single["num_processes"] == 1
    for length, loss in single["metrics"]["held_out_loss"].items():
        assert double["metrics"]["held_out_loss"][length] == pytest.approx(loss, rel=1e-3)


@pytest.mark.parametrize("model_type", ["electra", "distilbert"])
def test_heads_of_several_modules_are_refused_before_loading(model_type, workspace, tmp_path, monkeypatch, capsys):
    folder = tmp_path / model_type
    AutoModelForMaskedLM.from_config(tiny_config(model_type)).save_pretrained(folder)
    monkeypatch.setattr(adapt_run, "build_objective", lambda *args: pytest.fail("a model was loaded"))
    argv = adapt_argv(workspace, tmp_path / "run", "--objective", "mlm", "--tokenizer", str(workspace / "bert"))
    argv[argv.index("--model") + 1] = str(folder)  # a model folder without a tokenizer: the tokenizer comes apart
    assert adapt_main(argv) == 2
    error = capsys.readouterr().err
    assert "ForMaskedLM has no MLM head in one module (modules besides the encoder: " in error
    assert "Use distillation." in error and not (tmp_path / "run").exists()
