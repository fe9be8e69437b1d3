"""The `tisa-hf` console command: every command's --help answers from its parser alone, without torch, and is the
help the command itself prints; everything else runs with tisa_hf imported (and registered) as usual."""

import json
import subprocess
import sys

import pytest
import torch

from tisa_hf.commands import cli

# What a help request must not import: each takes seconds, and none is needed to print options.
HEAVY_MODULES = ("torch", "transformers.modeling_utils", "accelerate", "datasets", "matplotlib", "sklearn", "peft")


def front(argv: list[str], after: str = "") -> tuple[subprocess.CompletedProcess, dict]:
    """Runs `tisa-hf ARGV` through the console script's module in a fresh interpreter, then `after` (Python code
    whose `facts` dict is added to the report); returns the process and the report of what it had imported."""
    code = (
        "import json, sys, tisa_hf_cli\n"
        f"try:\n    status = tisa_hf_cli.main({argv!r})\n"
        "except SystemExit as stop:\n    status = stop.code\n"
        f"facts = {{}}\n{after}\n"
        f"heavy = [name for name in {HEAVY_MODULES!r} if name in sys.modules]\n"
        "print('REPORT ' + json.dumps({'status': status, 'heavy': heavy, **facts}))\n"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    printed, _, report = completed.stdout.partition("REPORT ")
    return subprocess.CompletedProcess(completed.args, completed.returncode, printed, completed.stderr), json.loads(
        report
    )


@pytest.mark.parametrize("command", sorted(cli.COMMANDS))
def test_help_of_every_command_imports_no_heavy_library(command):
    completed, report = front([command, "--help"])
    assert report == {"status": 0, "heavy": []}
    assert completed.stdout.startswith(f"usage: tisa-hf {command} ")


def test_command_list_names_every_command_without_heavy_imports():
    completed, report = front([])
    assert report == {"status": 0, "heavy": []}
    listed = [line.split()[0] for line in completed.stdout.split("commands:\n")[1].splitlines()]
    assert listed == list(cli.COMMANDS)


@pytest.mark.parametrize("command", ["glue", "analyze", "lm-eval"])
def test_fast_help_is_the_commands_own_help(command, capsys):
    """The command module's main, run with tisa_hf imported in full, prints the same help."""
    with pytest.raises(SystemExit) as stop:
        cli.load(cli.COMMANDS[command].run)(["--help"])
    assert stop.value.code == 0
    completed, _ = front([command, "--help"])
    assert capsys.readouterr().out == completed.stdout


def test_help_shows_the_settings_of_a_config_file(tmp_path):
    config = tmp_path / "run.yaml"
    config.write_text("task: rte\nlearning_rate: 3.0e-05\n")
    completed, report = front(["glue", "--config", str(config), "--help"])
    assert report == {"status": 0, "heavy": []}
    assert "(default: 3e-05)" in completed.stdout
    assert "(default: rte)" in completed.stdout


def test_adapt_defaults_to_the_packaged_minilm_which_runs_offline():
    completed, _ = front(["adapt", "--help"])
    model_help = " ".join(completed.stdout.split("  --model MODEL")[1].split("  --tokenizer")[0].split())
    assert model_help.endswith("'minilm' is the packaged all-MiniLM-L6-v2. (default: minilm)")


def test_a_run_imports_tisa_hf_in_full(tmp_path):
    """Without --help the front imports tisa_hf normally: its model types are registered with transformers."""
    after = (
        "from transformers import CONFIG_MAPPING\n"
        "facts['registered'] = 'tisa_hf_bert' in CONFIG_MAPPING\n"
        "facts['patch'] = hasattr(sys.modules['tisa_hf'], 'patch')"
    )
    completed, report = front(["sweep", "--config", str(tmp_path / "missing.yaml")], after)
    assert report["status"] == 2 and report["registered"] and report["patch"]
    assert f"tisa-hf sweep: Sweep file {tmp_path / 'missing.yaml'} does not exist." in completed.stderr


USAGE_MISTAKES = {
    "misspelt command": (
        ["demoo"],
        "tisa-hf: unknown command 'demoo'; did you mean 'demo'? the commands are " + ", ".join(cli.COMMANDS) + ".",
    ),
    "choice": (
        ["demo", "--mode", "replce"],
        "tisa-hf demo: argument --mode: invalid choice: 'replce' (choose from 'add', 'replace'); "
        "see tisa-hf demo --help.",
    ),
    "negative count": (
        ["demo", "--kernels", "-3"],
        "tisa-hf demo: argument --kernels: must be at least 0, got -3; see tisa-hf demo --help.",
    ),
    "typed option of a dataclass command, named as typed": (
        ["glue", "--tisa.num_kernels", "abc"],
        "tisa-hf glue: argument --tisa.num_kernels: invalid int value: 'abc'; see tisa-hf glue --help.",
    ),
    "typed option of a dataclass command, in its other spellings": (
        ["glue", "--tisa-num-kernels", "abc"],
        "tisa-hf glue: argument --tisa_num_kernels/--tisa-num-kernels: invalid int value: 'abc'; "
        "see tisa-hf glue --help.",
    ),
    "unknown dotted option, named as typed": (
        ["glue", "--tisa.nonsense=3"],
        "tisa-hf glue: unrecognized arguments: --tisa.nonsense=3; see tisa-hf glue --help.",
    ),
    "unknown option of a dataclass command": (
        ["adapt", "--bogus", "5"],
        "tisa-hf adapt: unrecognized arguments: --bogus 5; see tisa-hf adapt --help.",
    ),
    "setting a dataclass refuses": (
        ["squad", "--train-batch-size", "0"],
        "tisa-hf squad: --train-batch-size must be at least 1; got 0.",
    ),
}


@pytest.mark.parametrize("case", USAGE_MISTAKES, ids=list(USAGE_MISTAKES))
def test_a_usage_error_answers_as_help_does_without_heavy_imports(case):
    """A command line the options refuse is one line, from the options alone: no torch, as fast as --help."""
    argv, line = USAGE_MISTAKES[case]
    completed, report = front(argv)
    assert report == {"status": 2, "heavy": []}
    assert completed.stderr.splitlines() == [line]


@pytest.mark.parametrize("debug", ["option", "variable", None])
def test_a_usage_error_is_one_line_and_its_traceback_is_opt_in(debug, tmp_path, capsys, monkeypatch):
    """The one error boundary: `tisa-hf CMD: message`, status 2; the traceback (cause kept) only when asked for."""
    missing = tmp_path / "missing.yaml"
    argv = ["sweep", "--config", str(missing)]
    if debug == "option":
        argv = ["--debug", *argv]
    monkeypatch.setenv("TISA_HF_DEBUG", "1" if debug == "variable" else "")
    assert cli.main(argv) == 2
    err = capsys.readouterr().err
    assert err.endswith(f"tisa-hf sweep: Sweep file {missing} does not exist.\n")
    if debug is None:
        assert err.count("\n") == 1
    else:
        assert "FileNotFoundError" in err and "The above exception was the direct cause" in err


def test_python_dash_m_tisa_hf_is_the_command_line_with_its_one_line_errors(tmp_path):
    """`python -m tisa_hf COMMAND` answers as `tisa-hf COMMAND`: a usage error is one line and status 2."""
    completed = subprocess.run(
        [sys.executable, "-m", "tisa_hf", "longembed", "minilm", "--text", str(tmp_path / "absent.txt")]
        + ["--lengths", "256", "--out", str(tmp_path / "out")],
        capture_output=True,
        text=True,
    )
    assert completed.returncode == 2
    assert completed.stderr.splitlines() == [
        f"tisa-hf longembed: --text {tmp_path / 'absent.txt'}: no such file; pass --text with a plain-text file to "
        "cut the needle task's documents from (WikiText-2's test.txt)."
    ]


@pytest.mark.skipif(torch.cuda.is_available(), reason="refusing --device cuda needs a machine without CUDA")
def test_env_checks_its_device_as_every_command_does(capsys):
    """--device goes through one check (`common.machine.checked_device`; tests/test_sts.py asks sts): on a machine
    without CUDA, a CUDA device is one line."""
    assert cli.main(["env", "--device", "cuda"]) == 2
    assert (
        capsys.readouterr().err == "tisa-hf env: --device cuda, but this torch sees no CUDA device; use --device cpu.\n"
    )


def fake_index(folder, model) -> None:
    """A finished index as far as search's checks read it: its record naming `model`, and its offsets."""
    folder.mkdir()
    record = {"settings": {"model": str(model), "token_centroids": None}, "documents": 1, "parts": 1}
    (folder / "index.json").write_text(json.dumps(record))
    (folder / "offsets.npy").write_bytes(b"")


FILE_MISTAKES = {
    "--input is a folder": (
        ["encode", "minilm", "--input", "{tmp}", "--out", "{tmp}/out"],
        "tisa-hf encode: --input {tmp} is a folder; give a JSON Lines file or a text file, one document a line.",
    ),
    "a text that is not a string": (
        ["encode", "minilm", "--input", "{tmp}/numbers.jsonl", "--out", "{tmp}/out"],
        "tisa-hf encode: {tmp}/numbers.jsonl:2: the value under 'text' is a number, not a string; give each "
        "document's text as a JSON string.",
    ),
    "--queries is a folder": (
        ["search", "{tmp}/index", "--queries", "{tmp}"],
        "tisa-hf search: --queries {tmp} is a folder; give a JSON Lines file or a text file, one query a line.",
    ),
    "the index's model folder is gone": (
        ["search", "{tmp}/index", "--query", "blue"],
        "tisa-hf search: {tmp}/moved, the model folder {tmp}/index/index.json names, is gone (moved or deleted); "
        "give where it is now with --model.",
    ),
    "a misspelt option, named before the missing one": (
        ["search", "{tmp}/index", "--querry", "blue"],
        "tisa-hf search: unknown option --querry; did you mean --query? see tisa-hf search --help.",
    ),
    "demo's --out is a file": (
        ["demo", "--out", "{tmp}/numbers.jsonl"],
        "tisa-hf demo: --out {tmp}/numbers.jsonl is a file; give a folder (it is created when missing).",
    ),
}


@pytest.mark.parametrize("case", FILE_MISTAKES, ids=list(FILE_MISTAKES))
def test_a_bad_file_folder_or_model_path_answers_before_torch_is_imported(case, tmp_path):
    """The checks of the paths, files and fields a command line names run from light modules (`Command.checks`),
    as the options' do: one line, status 2, no torch."""
    argv, line = FILE_MISTAKES[case]
    (tmp_path / "numbers.jsonl").write_text('{"text": "one"}\n{"text": 42}\n')
    fake_index(tmp_path / "index", tmp_path / "moved")
    completed, report = front([argument.format(tmp=tmp_path) for argument in argv])
    assert report == {"status": 2, "heavy": []}
    assert completed.stderr.splitlines() == [line.format(tmp=tmp_path)]


def test_ctrl_c_in_a_command_that_keeps_nothing_is_one_line_with_status_130(tmp_path, monkeypatch, capsys):
    """Ctrl-C goes through the one error boundary: no traceback; `tests/test_index_search.py` and
    `tests/test_corpus.py` interrupt resumable commands, which say what they kept."""
    from tisa_hf.commands import demo

    def interrupted(args):
        raise KeyboardInterrupt

    monkeypatch.setattr(demo, "run", interrupted)
    assert cli.main(["demo", "--out", str(tmp_path / "demo")]) == 130
    assert capsys.readouterr().err.splitlines() == [
        "tisa-hf demo: interrupted; this command keeps nothing to resume, so it starts over when run again."
    ]


def test_every_resumable_command_says_how_it_carries_on():
    """The commands that keep their work as they go (parts, documents, cells, checkpoints) are the ones whose
    Ctrl-C line says how to resume; the training commands resume from a checkpoint with --resume."""
    resumable = {name for name, command in cli.COMMANDS.items() if command.resumes is not None}
    assert resumable == {
        "glue", "squad", "classify", "sweep", "adapt", "lm-eval", "longembed", "qmsum", "qmsum-passages",
        "context-passages", "context-train", "spans", "encode", "index", "sts",
    }  # fmt: skip
    assert {name for name in resumable if "--resume" in cli.COMMANDS[name].resumes} == {
        "glue", "squad", "classify", "adapt",
    }  # fmt: skip


def test_the_normal_path_is_quiet_libraries_from_warning_and_a_small_codebook_said_once():
    """A command's logging: tisa-hf's INFO lines, the libraries' from WARNING on whatever level they set their
    loggers to (bm25s sets DEBUG when imported), and a pq codebook learned from too few vectors said once in
    tisa-hf's words rather than by faiss once a sub-vector."""
    code = (
        "import logging, numpy as np\n"
        "from tisa_hf.commands import cli\n"
        "cli.configure_logging()\n"
        "from tisa_hf.embeddings.lexical import bm25_index\n"
        "bm25_index(['one two', 'three four'], 'english')\n"
        "logging.getLogger('tisa_hf.own').info('own note')\n"
        "from tisa_hf.multivector.compression import train_codebook\n"
        "train_codebook(np.random.default_rng(0).standard_normal((300, 32)).astype(np.float32), 'pq4')\n"
    )
    completed = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert [line.split(" ", 2)[2] for line in completed.stderr.splitlines()] == [
        "INFO tisa_hf.own: own note",
        "WARNING tisa_hf.multivector.compression: --dtype pq4 learns its 256 centroids a sub-vector from the first "
        "part's 300 token vectors, fewer than the 9984 that faiss advises; the codebook is coarser than it could be "
        "(a larger --part-size gives it more).",
    ]


def test_demo_help_explains_every_option_and_shows_the_defaults():
    completed, report = front(["demo", "--help"])
    assert report == {"status": 0, "heavy": []}
    text = " ".join(completed.stdout.split())
    assert "--out OUT output folder (default: tisa-demo)" in text
    assert (
        "--kernels KERNELS S, kernels per head and layer; 0 fits none, bag of words with --mode replace (default: 5)"
        in text
    )
    assert (
        "--mode {add,replace} add: TISA's bias beside the position embeddings; replace: the embeddings replaced by "
        "their mean, so inputs may be longer than the position table (default: add)" in text
    )
