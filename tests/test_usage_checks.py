"""Options and input files a user can get wrong are one line naming the problem, before any model loads or any
timing starts (`tisa-hf adapt`, `analyze`, `compare`, `bench`, `demo`)."""

import subprocess

import pytest
import torch
from transformers import AutoModel

from tests.fixtures import write_tiny_model, write_wikitext
from tisa_hf.adapt import adapt_task
from tisa_hf.analysis import commands
from tisa_hf.commands import cli, demo
from tisa_hf.config import TisaConfig
from tisa_hf.errors import UsageError
from tisa_hf.performance import bench


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("usage")
    write_tiny_model(root / "bert")
    write_wikitext(root / "text.txt")
    (root / "file").write_text("")
    return root


ADAPT_MISTAKES = {
    "no examples per batch": (("--train-batch-size", "0"), "--train-batch-size must be at least 1; got 0."),
    "no micro-batches per step": (
        ("--gradient-accumulation-steps", "0"),
        "--gradient-accumulation-steps must be at least 1; got 0.",
    ),
    "negative logging interval": (("--logging-steps", "-1"), "--logging-steps must be at least 0; got -1."),
    "negative learning rate": (("--learning-rate", "-1"), "--learning-rate must be at least 0; got -1.0."),
    "no held-out block": (("--max-eval-blocks", "0"), "--max-eval-blocks must be at least 1"),
    "no masked token": (("--mlm-probability", "0"), "--mlm-probability is the share of tokens masked, in (0, 1]"),
    "output folder under a file": (
        ("--output-dir", "{root}/file/run"),
        "--output-dir {root}/file/run lies under the file {root}/file; give a folder (it is created when missing).",
    ),
}


@pytest.mark.parametrize("case", ADAPT_MISTAKES, ids=list(ADAPT_MISTAKES))
def test_adapt_mistakes_are_one_line_before_any_model_loads(case, workspace, tmp_path, monkeypatch, capsys):
    extra, message = ADAPT_MISTAKES[case]

    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(adapt_task, "build_objective", no_loading)
    argv = [
        "--model", str(workspace / "bert"), "--train-text", str(workspace / "text.txt"), "--lengths", "16",
        "--max-steps", "2", "--tisa.num_kernels", "2", "--no-tracking", "--output-dir", str(tmp_path / "run"),
    ]  # fmt: skip
    assert cli.main(["adapt", *argv, *(value.format(root=workspace) for value in extra)]) == 2
    error = capsys.readouterr().err
    assert error.count("\n") == 1 and message.format(root=workspace) in error
    assert not (tmp_path / "run").exists()


def test_analyze_and_compare_check_their_output_folder_and_text_before_analysing(workspace, monkeypatch, capsys):
    model = str(workspace / "bert")
    monkeypatch.setattr(commands, "analyze_model", lambda *args: pytest.fail("analysed"))
    assert cli.main(["analyze", model, "--out", str(workspace / "file"), "--max-len", "16"]) == 2
    assert capsys.readouterr().err == (
        f"tisa-hf analyze: --out {workspace / 'file'} is a file; give a folder (it is created when missing).\n"
    )
    binary = workspace / "binary.txt"
    binary.write_bytes(b"a sentence\n\xff\xfe")
    argv = [model, "--out", str(workspace / "report"), "--max-len", "16", "--text-file", str(binary)]
    assert cli.main(["analyze", *argv]) == 2
    assert capsys.readouterr().err == (
        f"tisa-hf analyze: Text file {binary} is not UTF-8 text (byte 0xff at offset 11); give a plain-text "
        "file, or convert it to UTF-8.\n"
    )
    assert cli.main(["compare", model, "--out", str(workspace / "file" / "x"), "--max-len", "16"]) == 2
    assert "--out " in capsys.readouterr().err


def test_bench_checks_its_device_output_and_counts_before_timing(workspace, capsys):
    with pytest.raises(UsageError, match=r"its folder .*file is a file; give a folder"):
        bench.parse_args(["--output", str(workspace / "file" / "bench.json")])
    with pytest.raises(UsageError, match=r"^--output .* is a folder; give a file path such as bench.json.$"):
        bench.parse_args(["--output", str(workspace)])
    if not torch.cuda.is_available():
        with pytest.raises(UsageError, match=r"^--device cuda, but this torch sees no CUDA device; use --device cpu.$"):
            bench.parse_args(["--device", "cuda", "--output", str(workspace / "bench.json")])
    with pytest.raises(UsageError, match=r"^--sdpa-backend efficient is a CUDA kernel; give --device cuda, or leave"):
        bench.parse_args(["--device", "cpu", "--sdpa-backend", "efficient", "--output", str(workspace / "bench.json")])
    with pytest.raises(
        UsageError, match=r"^--sections replace-train reads past the position table, which eager .* add"
    ):
        bench.parse_args(
            ["--sections", "train", "replace-train", "--implementations", "eager", "--output", "/dev/null"]
        )
    eager_only = bench.parse_args(["--device", "cpu", "--implementations", "eager", "--output", "/dev/null"])
    assert eager_only.sections == ["bias", "train", "infer"]  # the default, less replace, which eager does not time
    assert bench.parse_args(["--device", "cpu", "--output", "/dev/null"]).sections == [
        "bias",
        "train",
        "infer",
        "replace",
    ]
    for option, value, message in (
        ("--repeats", "0", "must be at least 1, got 0"),
        ("--bias-lengths", "-16", "must be at least 1, got -16"),
        ("--warmup", "-1", "must be at least 0, got -1"),
        ("--attention-dropout", "1", "must be in [0, 1), got 1.0"),
    ):
        with pytest.raises(SystemExit):
            bench.parse_args([option, value, "--output", str(workspace / "bench.json")])
        assert f"argument {option}: {message}" in capsys.readouterr().err


def test_bench_long_refuses_a_model_with_a_position_table_before_loading_it(workspace, tmp_path, monkeypatch):
    """The long section times --long-model as TISA past 512 tokens: a plain or `add` model is refused from its
    config, before any model loads (a plain MiniLM once ended in a tensor-size traceback after minutes)."""
    monkeypatch.setattr(bench, "build_model", lambda *args: pytest.fail("a model was built"))
    argv = ["--sections", "long", "--long-lengths", "1024", "--output", str(workspace / "bench.json")]
    with pytest.raises(UsageError) as raised:
        bench.parse_args([*argv, "--long-model", "minilm"])
    assert str(raised.value) == (
        "--long-model minilm has a position table of 512 positions (no TISA); the long section needs a saved TISA "
        "replace model (such as tisa-hf adapt writes), or leave --long-model out for the packaged MiniLM with "
        "replace kernels fitted at load."
    )
    replace = tmp_path / "replace"
    tisa = TisaConfig(num_kernels=2, mode="replace", init="random")
    AutoModel.from_pretrained(workspace / "bert", tisa=tisa).save_pretrained(replace)
    assert bench.parse_args([*argv, "--long-model", str(replace)]).long_model == str(replace)


@pytest.mark.parametrize(
    ("returncode", "stderr"),
    [(-9, ""), (1, "RuntimeError: DefaultCPUAllocator: not enough memory: you tried to allocate 1 bytes.")],
    ids=["oom killer", "allocator"],
)
def test_a_memory_worker_that_ran_out_of_memory_is_one_line(returncode, stderr, monkeypatch):
    case = bench.ModelCase("replace", "sdpa", 1, 8192, True, "float32", "cpu", 0.0)
    failed = subprocess.CompletedProcess([], returncode, stdout="", stderr=stderr)
    monkeypatch.setattr(bench.subprocess, "run", lambda *args, **kwargs: failed)
    with pytest.raises(UsageError) as raised:
        bench.peak_memory_of(case)
    assert str(raised.value) == (
        "replace sdpa 1x8192 float32 ran out of memory in its peak-memory run (the rows before it are in --output); "
        "leave out the lengths that do not fit, or skip memory with --no-memory."
    )


def test_a_memory_worker_that_failed_otherwise_keeps_its_traceback(monkeypatch):
    case = bench.ModelCase("replace", "sdpa", 1, 8192, True, "float32", "cpu", 0.0)
    failed = subprocess.CompletedProcess([], 1, stdout="", stderr="Traceback ...\nKeyError: 'x'")
    monkeypatch.setattr(bench.subprocess, "run", lambda *args, **kwargs: failed)
    with pytest.raises(RuntimeError, match=r"^Memory measurement of replace sdpa 1x8192 float32 failed:\nTraceback"):
        bench.peak_memory_of(case)


def test_demo_overwrite_starts_over_in_a_finished_demos_folder(tmp_path, monkeypatch, capsys):
    """A finished demo is refused (in test_minilm, after a real one); --overwrite removes its summary, so that an
    interrupted new demo does not look finished, and goes on to load the model."""
    (tmp_path / demo.SUMMARY_FILE).write_text("{}")
    assert cli.main(["demo", "--out", str(tmp_path)]) == 2
    assert "choose another --out or pass --overwrite." in capsys.readouterr().err

    class Loading(Exception):
        pass

    def loading(*args, **kwargs):
        raise Loading

    monkeypatch.setattr(demo, "load_under_head", loading)
    with pytest.raises(Loading):
        cli.main(["demo", "--out", str(tmp_path), "--overwrite"])
    assert not (tmp_path / demo.SUMMARY_FILE).exists()
