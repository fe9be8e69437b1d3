"""Damaged saved files (a truncated weights file, a broken config.json, an incomplete checkpoint) are one line
naming the file, before anything loads."""

import shutil

import pytest
from transformers import AutoModel

from tests.fixtures import write_rte_tsv, write_tiny_model, write_wikitext
from tisa_hf.adapt import adapt_task as adapt_run
from tisa_hf.adapt.arguments import ADAPT_ARGUMENTS
from tisa_hf.commands.cli import entry
from tisa_hf.common.hub_access import loading_errors, model_source
from tisa_hf.common.saved_files import check_checkpoint
from tisa_hf.errors import UsageError
from tisa_hf.finetune import trainer
from tisa_hf.finetune.arguments import parse_arguments

INCOMPLETE = "Error while deserializing header: incomplete metadata, file not fully covered"


def truncate(path, keep=0.5):
    data = path.read_bytes()
    path.write_bytes(data[: int(len(data) * keep)])


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("saved_files")
    write_tiny_model(root / "bert")
    write_wikitext(root / "text.txt")
    write_rte_tsv(root / "RTE")
    return root


def test_a_truncated_weights_file_is_named(workspace, tmp_path, capsys):
    damaged = shutil.copytree(workspace / "bert", tmp_path / "damaged")
    truncate(damaged / "model.safetensors")
    message = (
        f"{damaged / 'model.safetensors'} is damaged or incomplete ({INCOMPLETE}); re-download the model, or re-save "
        "it with save_pretrained."
    )
    with pytest.raises(UsageError) as raised:
        model_source(str(damaged))
    assert str(raised.value) == message
    argv = [str(damaged), "--text", str(workspace / "text.txt"), "--lengths", "8", "--out", str(tmp_path / "out")]
    assert entry("lm-eval")(argv) == 2
    assert capsys.readouterr().err == f"tisa-hf lm-eval: {message}\n"
    # where the folder check does not reach (a Hub cache), the load itself is one line too
    expected = rf"^Could not load the model x: a weights file is damaged or incomplete \({INCOMPLETE}\); re-download"
    with pytest.raises(UsageError, match=expected), loading_errors("the model x", "use minilm"):
        AutoModel.from_pretrained(damaged)


def test_a_broken_config_is_named_with_its_json_error(workspace, tmp_path, capsys):
    broken = shutil.copytree(workspace / "bert", tmp_path / "broken")
    (broken / "config.json").write_text('{"model_type": "bert",')
    argv = ["--model", str(broken), "--task", "rte", "--data-dir", str(workspace / "RTE")]
    assert entry("glue")([*argv, "--output-dir", str(tmp_path / "run"), "--no-tracking"]) == 2
    assert capsys.readouterr().err == (
        f"tisa-hf glue: {broken / 'config.json'} is not valid JSON (Expecting property name enclosed in double "
        "quotes: line 1 column 23 (char 22)); repair it, or re-save or re-download the model.\n"
    )  # not "Could not load the tokenizer", which loads first


def adapt_argv(workspace, output_dir, *extra):
    return [
        "--model", str(workspace / "bert"), "--train-text", str(workspace / "text.txt"), "--output-dir",
        str(output_dir), "--lengths", "16", "--max-steps", "3", "--train-batch-size", "4", "--tisa.num_kernels", "2",
        "--no-tracking", "--checkpoint-steps", "1", *extra,
    ]  # fmt: skip


@pytest.fixture(scope="module")
def interrupted_run(workspace, tmp_path_factory):
    """A run folder holding the checkpoint of step 1, killed before step 2."""
    output_dir = tmp_path_factory.mktemp("interrupted") / "run"
    save = trainer.save_checkpoint

    def killed_after_saving(accelerator, output_dir, state):
        save(accelerator, output_dir, state)
        raise KeyboardInterrupt

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(trainer, "save_checkpoint", killed_after_saving)
        with pytest.raises(KeyboardInterrupt):
            adapt_run.run(*parse_arguments(ADAPT_ARGUMENTS, adapt_argv(workspace, output_dir), prog="test"))
    return output_dir


DAMAGE = {
    "truncated weights": ("model.safetensors", f"model.safetensors is damaged or incomplete ({INCOMPLETE})"),
    "truncated optimizer state": ("optimizer.bin", "optimizer.bin is damaged or incomplete (File is not a zip file)"),
    "missing optimizer state": ("optimizer.bin", "step-1 lacks its model weights or optimizer state"),
    "broken trainer state": ("trainer_state.json", "trainer_state.json is damaged or incomplete (Expecting"),
}


@pytest.mark.parametrize("case", DAMAGE, ids=list(DAMAGE))
def test_a_damaged_checkpoint_is_refused_before_resuming_loads_anything(
    case, workspace, interrupted_run, tmp_path, monkeypatch, capsys
):
    run = shutil.copytree(interrupted_run, tmp_path / "run")
    checkpoint = run / "checkpoints" / "step-1"
    check_checkpoint(checkpoint)  # intact: no complaint
    name, message = DAMAGE[case]
    if case.startswith("missing"):
        (checkpoint / name).unlink()
    else:
        truncate(checkpoint / name, keep=0.9)

    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(adapt_run, "build_objective", no_loading)
    assert entry("adapt")(adapt_argv(workspace, run, "--resume")) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and error.startswith(f"tisa-hf adapt: --resume: {checkpoint}")
    assert message in error
    assert error.endswith(
        "; restore it (copy it again), or pass --overwrite-output-dir to start the run again from scratch.\n"
    )
