"""What `tisa-hf glue` and `tisa-hf squad` refuse, in one line and before a model is loaded: empty data, a run
folder a run would damage, changed settings on resume, an unreadable random-number state, an unreachable Hub, an
upload that cannot work; and what a normal run writes to a log file. Nothing here reaches the network."""

import importlib
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import datasets
import huggingface_hub
import pytest
import yaml
from huggingface_hub import HfApi, errors

from tests.fixtures import glue_argv, write_rte_tsv, write_tiny_model
from tisa_hf.commands.glue import main as glue
from tisa_hf.commands.squad import main as squad
from tisa_hf.common import hub_access
from tisa_hf.finetune import trainer
from tisa_hf.finetune.glue import task as glue_module
from tisa_hf.finetune.squad import task as squad_module

ROOT = Path(__file__).resolve().parents[1]
HEADER = "index\tsentence1\tsentence2\tlabel\n"
RESUMABLE = ("--checkpoint-steps", "4", "--tisa.num_kernels", "1", "--tisa.init", "random")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("checks")
    write_rte_tsv(root / "RTE")
    write_tiny_model(root / "bert")
    return root


def refuse_to_load(*args, **kwargs):
    raise AssertionError("the model was loaded before the error")


@pytest.fixture
def no_model_loading(monkeypatch):
    """Fails a test whose run gets as far as loading a model."""
    monkeypatch.setattr(glue_module, "load_model_and_tokenizer", refuse_to_load)
    monkeypatch.setattr(squad_module, "load_model_and_tokenizer", refuse_to_load)


def error_line(capsys) -> str:
    """The one line a refused run prints to stderr (and that it is one line, without a traceback)."""
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err.rstrip("\n")


def without(argv: list[str], option: str) -> list[str]:
    index = argv.index(option)
    return argv[:index] + argv[index + 2 :]


def connection_error() -> Exception:
    """What the Hub's HTTP client raises without a network."""
    client = importlib.import_module(errors.HTTPError.__module__)
    return client.ConnectError("[Errno -2] Name or service not known")


# Empty data


@pytest.mark.parametrize("empty", ["train.tsv", "dev.tsv"])
def test_empty_glue_file_is_named_before_the_model_loads(workspace, tmp_path, capsys, no_model_loading, empty):
    data = write_rte_tsv(tmp_path / "RTE")
    (data / empty).write_text(HEADER)
    output = tmp_path / "run"
    assert glue([*glue_argv(workspace, output), "--data-dir", str(tmp_path)]) == 2
    assert error_line(capsys) == (
        f"tisa-hf glue: {data / empty} holds no examples; training and evaluation need at least one in every split."
    )
    assert not output.exists()  # refused before the run folder is touched


def test_glue_file_without_a_header_is_named(workspace, tmp_path, capsys, no_model_loading):
    data = write_rte_tsv(tmp_path / "RTE")
    (data / "train.tsv").write_text("")
    assert glue([*glue_argv(workspace, tmp_path / "run"), "--data-dir", str(tmp_path)]) == 2
    assert error_line(capsys) == f"tisa-hf glue: {data / 'train.tsv'} is empty; GLUE RTE files start with a header row."


@pytest.mark.parametrize(("suffix", "empty_text"), [(".csv", "sentence1,sentence2,label\n"), (".jsonl", "")])
def test_empty_csv_or_json_file_is_named(workspace, tmp_path, capsys, no_model_loading, suffix, empty_text):
    train, dev = tmp_path / f"train{suffix}", tmp_path / f"dev{suffix}"
    if suffix == ".csv":
        train.write_text("sentence1,sentence2,label\na b,c,entailment\n")
    else:
        train.write_text(json.dumps({"sentence1": "a b", "sentence2": "c", "label": "entailment"}) + "\n")
    dev.write_text(empty_text)
    argv = without(glue_argv(workspace, tmp_path / "run"), "--data-dir")
    assert glue([*argv, "--train-file", str(train), "--validation-file", str(dev)]) == 2
    assert error_line(capsys) == (
        f"tisa-hf glue: {dev} holds no examples; training and evaluation need at least one in every split."
    )


def test_a_limit_of_zero_examples_is_refused(workspace, tmp_path, capsys, no_model_loading):
    assert glue([*glue_argv(workspace, tmp_path / "run"), "--max-train-samples", "0"]) == 2
    assert error_line(capsys) == "tisa-hf glue: --max-train-samples must be at least 1, got 0."


def test_squad_file_without_questions_is_named_before_the_model_loads(workspace, tmp_path, capsys, no_model_loading):
    context = "w1 w2 w3 w4"
    qa = {"id": "q", "question": "w1", "answers": [{"text": "w2", "answer_start": 3}]}
    train, dev = tmp_path / "train.json", tmp_path / "dev.json"
    train.write_text(json.dumps({"data": [{"title": "t", "paragraphs": [{"context": context, "qas": [qa]}]}]}))
    dev.write_text(json.dumps({"version": "1.1", "data": []}))
    argv = ["--model", str(workspace / "bert"), "--output-dir", str(tmp_path / "run"), "--no-tracking"]
    assert squad([*argv, "--train-file", str(train), "--validation-file", str(dev)]) == 2
    assert error_line(capsys) == (
        f"tisa-hf squad: {dev} (no questions) holds no examples; training and evaluation need at least one in every "
        "split."
    )


# The run folder and --resume


def kill_at_step_8(argv: list[str]) -> None:
    """Runs `tisa-hf glue argv` until it is killed after step 8 (its last checkpoint: step 4)."""
    save = trainer.save_checkpoint

    def die_at_step_8(accelerator, output_dir, state):
        if state.step == 8:
            raise KeyboardInterrupt
        save(accelerator, output_dir, state)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(trainer, "save_checkpoint", die_at_step_8)
        assert glue(argv) == 130  # Ctrl-C's exit status: the command line says what was kept in one line


@pytest.fixture(scope="module")
def interrupted(workspace, tmp_path_factory):
    """A run killed after step 8, whose last checkpoint is step 4."""
    folder = tmp_path_factory.mktemp("interrupted") / "run"
    kill_at_step_8(glue_argv(workspace, folder, *RESUMABLE))
    return folder


@pytest.fixture
def resumable(interrupted, tmp_path):
    return Path(shutil.copytree(interrupted, tmp_path / "run"))


@pytest.mark.parametrize(
    ("change", "listed"),
    [
        (("--tisa.num_kernels", "2"), "tisa_num_kernels: 1 -> 2"),
        (("--seed", "2"), "seed: 1 -> 2"),
        (("--learning-rate", "5e-4", "--max-steps", "16"), "learning_rate: 0.001 -> 0.0005; max_steps: 12 -> 16"),
    ],
)
def test_resume_refuses_settings_that_change_the_result(workspace, resumable, capsys, no_model_loading, change, listed):
    saved = (resumable / "run_config.yaml").read_bytes()
    assert glue(glue_argv(workspace, resumable, *RESUMABLE, *change, "--resume")) == 2
    message = error_line(capsys)
    assert message.startswith(
        f"tisa-hf glue: --resume: these settings differ from the run in {resumable} (run_config.yaml), and a resumed "
        f"run must keep them: {listed}. Use the saved values"
    )
    assert "Only output_dir, logging_steps, checkpoint_steps, report_to, no_tracking, push_to_hub" in message
    assert (resumable / "run_config.yaml").read_bytes() == saved  # not rewritten with settings it never ran with


def test_resume_accepts_reporting_changes_and_finishes(workspace, resumable, capsys):
    assert glue(glue_argv(workspace, resumable, *RESUMABLE, "--resume", "--logging-steps", "4")) == 0
    metrics = json.loads((resumable / "metrics.json").read_text())
    assert metrics["steps"] == 12 and [entry["step"] for entry in metrics["history"]] == [6, 12]
    assert yaml.safe_load((resumable / "run_config.yaml").read_text())["logging_steps"] == 4


def test_resume_of_an_epoch_run_compares_the_resolved_schedule(workspace, tmp_path, capsys):
    """run_config.yaml holds max_steps and warmup_steps resolved from --num-train-epochs and --warmup-ratio; the
    same command resumes, and the same command on grown training data is refused once the data is counted."""
    data = tmp_path / "data"
    write_rte_tsv(data / "RTE")  # 64 examples: 8 steps an epoch
    folder = tmp_path / "run"
    epochs = ("--num-train-epochs", "1.5", "--warmup-ratio", "0.2", "--warmup-steps", "0")
    argv = [*without(glue_argv(workspace, folder, *RESUMABLE, *epochs), "--max-steps"), "--data-dir", str(data)]
    kill_at_step_8(argv)
    saved = yaml.safe_load((folder / "run_config.yaml").read_text())
    assert (saved["max_steps"], saved["warmup_steps"]) == (12, 3)  # ceil(1.5 x 8), ceil(0.2 x 12)
    grown = Path(shutil.copytree(folder, tmp_path / "grown"))

    assert glue([*argv, "--resume"]) == 0
    assert json.loads((folder / "metrics.json").read_text())["steps"] == 12
    capsys.readouterr()

    write_rte_tsv(data / "RTE", train_rows=80)  # 10 steps an epoch
    grown_argv = [*argv, "--resume"]
    grown_argv[grown_argv.index("--output-dir") + 1] = str(grown)
    assert glue(grown_argv) == 2
    assert error_line(capsys).startswith(
        f"tisa-hf glue: --resume: these settings differ from the run in {grown} (run_config.yaml), and a resumed "
        "run must keep them: max_steps: 12 -> 15. Use the saved values"
    )
    assert not (grown / "metrics.json").exists()


def test_unreadable_rng_state_is_an_error_unless_allowed(workspace, resumable, capsys, caplog):
    rng_file = resumable / "checkpoints" / "step-4" / "random_states_0.pkl"
    rng_file.write_bytes(b"not a torch file")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(glue_module, "load_model_and_tokenizer", refuse_to_load)
        assert glue(glue_argv(workspace, resumable, *RESUMABLE, "--resume")) == 2
    assert error_line(capsys).startswith(
        f"tisa-hf glue: --resume: the random-number state {rng_file} cannot be read (UnpicklingError"
    )
    assert glue(glue_argv(workspace, resumable, *RESUMABLE, "--resume", "--resume-without-rng-state")) == 0
    warnings = [record.getMessage() for record in caplog.records if record.levelname == "WARNING"]
    assert any(message.startswith("RESUMING WITHOUT THE RANDOM-NUMBER STATE: ") for message in warnings)
    assert any("will NOT reproduce an uninterrupted one" in message for message in warnings)


def test_new_run_into_a_folder_with_checkpoints_is_refused(workspace, resumable, capsys, no_model_loading):
    assert glue(glue_argv(workspace, resumable, *RESUMABLE)) == 2
    assert error_line(capsys) == (
        f"tisa-hf glue: {resumable} holds checkpoints of an unfinished run; pass --resume to continue it, or "
        "--overwrite-output-dir to start again from scratch."
    )
    assert (resumable / "checkpoints" / "step-4" / "trainer_state.json").is_file()


def test_finished_run_is_kept_unless_overwriting_is_asked_for(workspace, tmp_path, capsys):
    output = tmp_path / "run"
    short = ("--max-steps", "4", "--eval-steps", "0")
    assert glue(glue_argv(workspace, output, *short)) == 0
    capsys.readouterr()
    finished = {name: (output / name).read_bytes() for name in ("metrics.json", "model.safetensors")}
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(glue_module, "load_model_and_tokenizer", refuse_to_load)
        for extra in ((), ("--resume",)):
            assert glue(glue_argv(workspace, output, *short, *extra)) == 2
            assert error_line(capsys) == (
                f"tisa-hf glue: {output} holds a finished run (metrics.json); pass --overwrite-output-dir to train "
                "it again from scratch (its model and metrics are replaced), or choose another --output-dir."
            )
        assert glue(glue_argv(workspace, output, *short, "--resume", "--overwrite-output-dir")) == 2
        assert "pass one of them" in error_line(capsys)
    assert {name: (output / name).read_bytes() for name in finished} == finished
    assert glue(glue_argv(workspace, output, *short, "--seed", "2", "--overwrite-output-dir")) == 0
    assert json.loads((output / "metrics.json").read_text())["seed"] == 2


# The Hub: unreachable, offline, uploads


def test_unreachable_hub_fails_fast_naming_the_way_out(workspace, tmp_path, capsys, no_model_loading, monkeypatch):
    monkeypatch.setattr(hub_access, "hub_reachable", lambda timeout=None: False)
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda repo_id, filename: None)
    argv = without(glue_argv(workspace, tmp_path / "run"), "--model")  # the default, albert-base-v2
    assert glue(argv) == 2
    assert error_line(capsys) == (
        "tisa-hf glue: --model albert-base-v2 is not a local folder and not in the local Hub cache, and the Hugging "
        "Face Hub is unreachable, so it cannot be downloaded; use --model minilm (the packaged all-MiniLM-L6-v2) "
        "or a local model folder."
    )
    assert glue(without(glue_argv(workspace, tmp_path / "run"), "--data-dir")) == 2
    assert error_line(capsys) == (
        "tisa-hf glue: The dataset nyu-mll/glue comes from the Hugging Face Hub, which is unreachable; pass "
        "--data-dir with the GLUE TSV files, or --train-file and --validation-file (or set HF_HUB_OFFLINE=1 to use "
        "a copy in the local datasets cache)."
    )
    assert not (tmp_path / "run").exists()


def test_offline_mode_names_the_cache(workspace, tmp_path, capsys, no_model_loading, monkeypatch):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda repo_id, filename: None)
    assert glue(without(glue_argv(workspace, tmp_path / "run"), "--model")) == 2
    assert "--model albert-base-v2 is not a local folder and not in the local Hub cache, and HF_HUB_OFFLINE is set" in (
        error_line(capsys)
    )

    def uncached(*args, **kwargs):  # what datasets raises offline for a dataset it has not cached
        raise ConnectionError("Couldn't reach 'nyu-mll/glue' on the Hub (LocalEntryNotFoundError)")

    monkeypatch.setattr(datasets, "load_dataset", uncached)
    assert glue(without(glue_argv(workspace, tmp_path / "run"), "--data-dir")) == 2
    assert error_line(capsys) == (
        "tisa-hf glue: Could not load nyu-mll/glue (rte): HF_HUB_OFFLINE is set and the local cache does not hold "
        "it (Couldn't reach 'nyu-mll/glue' on the Hub (LocalEntryNotFoundError)); pass --data-dir with the GLUE TSV "
        "files, or --train-file and --validation-file."
    )


@pytest.mark.parametrize(
    ("repo_id", "token", "expected"),
    [
        ("a/b/c", "hf_test", "--push-to-hub: 'a/b/c' is not a Hub repository id"),
        ("someone/tiny-rte", None, "--push-to-hub: Uploading to someone/tiny-rte needs a Hugging Face token"),
    ],
)
def test_upload_target_is_checked_before_training(
    workspace, tmp_path, capsys, no_model_loading, monkeypatch, repo_id, token, expected
):
    monkeypatch.setattr(huggingface_hub, "get_token", lambda: token)
    output = tmp_path / "run"
    assert glue([*glue_argv(workspace, output), "--push-to-hub", repo_id]) == 2
    message = error_line(capsys)
    assert message.startswith(f"tisa-hf glue: {expected}")
    assert message.endswith(f"upload later with `tisa-hf push {output} {repo_id}`.")


def test_failed_upload_says_the_run_is_saved_and_how_to_retry(workspace, tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_test")

    def offline(self, *args, **kwargs):
        raise connection_error()

    monkeypatch.setattr(HfApi, "create_repo", offline)
    output = tmp_path / "run"
    assert glue(glue_argv(workspace, output, "--max-steps", "4", "--push-to-hub", "someone/tiny-rte")) == 2
    assert error_line(capsys) == (
        f"tisa-hf glue: Uploading {output} to someone/tiny-rte failed: the Hugging Face Hub is unreachable "
        f"([Errno -2] Name or service not known). The run is saved in {output}; retry with "
        f"`tisa-hf push {output} someone/tiny-rte`."
    )
    assert json.loads((output / "metrics.json").read_text())["steps"] == 4
    assert (output / "model.safetensors").is_file()


# The log of a normal run


def test_log_file_holds_plain_lines_and_no_library_chatter(workspace, tmp_path):
    argv = glue_argv(workspace, tmp_path / "run", *RESUMABLE)
    completed = subprocess.run(
        [sys.executable, "-m", "tisa_hf", "glue", *argv],
        cwd=ROOT,
        capture_output=True,  # stderr is a pipe, as when it goes to a log file
        text=True,
        timeout=300,
        env={"PATH": "/usr/bin:/bin", "PYTHONPATH": str(ROOT), "HOME": str(tmp_path), "OMP_NUM_THREADS": "1"},
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    log = completed.stderr
    assert "\r" not in log  # no progress bars
    assert not re.search(r"INFO (accelerate|httpx|huggingface_hub|datasets)", log)
    progress = re.findall(r"INFO tisa_hf\.finetune\.trainer: step (\d+)/12: training loss \d\.\d{4}", log)
    assert progress == ["3", "6", "9", "12"]
    assert re.findall(r"INFO tisa_hf\.finetune\.trainer: step (\d+): \{'validation'", log) == ["6", "12"]
    assert json.loads(completed.stdout)["output_dir"] == str(tmp_path / "run")
