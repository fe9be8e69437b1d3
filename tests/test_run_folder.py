"""The run folder's record read and its writer lock (one writer per folder; a dead holder's lock is free)."""

import json
import os
import signal
import subprocess
import sys
import textwrap

import pytest

from tisa_hf.errors import UsageError
from tisa_hf.finetune.run_folder import LOCK_HOLDER_FILE, RunFolder


def test_a_second_writer_is_refused_naming_the_holder(tmp_path):
    folder = RunFolder(tmp_path / "run")
    with folder.writer_lock():
        assert (folder.path / LOCK_HOLDER_FILE).read_text() == str(os.getpid())
        with pytest.raises(UsageError) as refused, RunFolder(folder.path).writer_lock():
            pytest.fail("a second writer got the lock")
        assert str(refused.value) == (
            f"{folder.path} is being written by another run (process {os.getpid()}); wait for it to end, or "
            "choose another --output-dir."
        )
    assert not (folder.path / LOCK_HOLDER_FILE).exists()
    with RunFolder(folder.path).writer_lock():  # released: the next run takes it
        pass


def test_the_lock_of_a_killed_writer_is_taken_over(tmp_path):
    folder = RunFolder(tmp_path / "run")
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
                import sys, time
                from tisa_hf.finetune.run_folder import RunFolder
                with RunFolder({str(folder.path)!r}).writer_lock():
                    print("locked", flush=True)
                    time.sleep(600)
            """),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "locked"
        with pytest.raises(UsageError, match=f"process {holder.pid}\\)"), folder.writer_lock():
            pytest.fail("the lock of a live writer was taken")
    finally:
        holder.send_signal(signal.SIGKILL)
        holder.wait()
    assert (folder.path / LOCK_HOLDER_FILE).read_text() == str(holder.pid)  # the stale side file stays behind
    with folder.writer_lock():
        assert (folder.path / LOCK_HOLDER_FILE).read_text() == str(os.getpid())


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("{", ": not valid JSON at line 1, column 2: Expecting property name enclosed in double quotes."),
        ("[1]", " holds a JSON list, not a run's record (an object)."),
        (
            json.dumps({"task": "rte", "model": "m"}),
            " lacks tisa, metrics; it needs the keys task, model, tisa, metrics.",
        ),
    ],
)
def test_an_unreadable_record_is_named(tmp_path, content, message):
    (tmp_path / "metrics.json").write_text(content)
    with pytest.raises(UsageError) as error:
        RunFolder(tmp_path).read_record()
    assert str(error.value) == f"{tmp_path / 'metrics.json'}{message}"


def test_a_record_round_trips(tmp_path):
    record = {"task": "rte", "model": "m", "tisa": None, "metrics": {"validation": {"accuracy": 0.5}}}
    RunFolder(tmp_path).write_record(record)
    assert RunFolder(tmp_path).read_record() == record
    assert RunFolder(tmp_path).is_finished()


def test_a_setting_newer_than_the_saved_run_counts_as_its_default_on_resume(tmp_path):
    # A run started before `embedding_max_length` existed: its run_config.yaml lacks it.
    folder = RunFolder(tmp_path)
    folder.checkpoint_dir(200).mkdir(parents=True)
    (folder.checkpoint_dir(200) / "trainer_state.json").write_text("{}")
    folder.write_run_config({"seed": 1, "max_steps": 900, "warmup_steps": 0})
    defaults = {"seed": 1, "max_steps": None, "warmup_steps": 0, "embedding_max_length": None}
    current = {"seed": 1, "max_steps": 900, "warmup_steps": 0, "embedding_max_length": None}
    assert folder.check(current, resume=True, overwrite=False, defaults=defaults) == folder.checkpoint_dir(200)
    with pytest.raises(UsageError, match=r"settings differ .*: embedding_max_length: None -> 4096\. "):
        folder.check({**current, "embedding_max_length": 4096}, resume=True, overwrite=False, defaults=defaults)
    with pytest.raises(UsageError, match=r"embedding_max_length: '\(not set\)' -> None\. "):
        folder.check(current, resume=True, overwrite=False)  # without the defaults, a missing setting differs


def test_clearing_for_a_new_run_removes_the_old_runs_records_and_sentence_transformers_files(tmp_path):
    folder = RunFolder(tmp_path / "run")
    outside = tmp_path / "outside"
    for path in ("run/checkpoints/step-2", "run/1_Pooling", "run/2_Normalize", "run/multi-vector", "outside"):
        (tmp_path / path).mkdir(parents=True)
    modules = [{"idx": 0, "path": ""}, {"idx": 1, "path": "1_Pooling"}, {"idx": 2, "path": "2_Normalize"}]
    (tmp_path / "run" / "modules.json").write_text(json.dumps([*modules, {"idx": 3, "path": "../outside"}]))
    for name in ("metrics.json", "predictions.json", "sentence_bert_config.json", "config.json", "model.safetensors"):
        (tmp_path / "run" / name).write_text("{}")
    (tmp_path / "run" / "1_Pooling" / "config.json").write_text("{}")
    folder.clear()
    assert sorted(path.name for path in folder.path.iterdir()) == ["config.json", "model.safetensors"]
    assert outside.is_dir()
