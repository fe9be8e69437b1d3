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
