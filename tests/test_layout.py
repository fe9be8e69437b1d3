"""The package's import graph (every `tisa_hf` import, lazy ones inside functions included): no cycle, no arrow from
a lower layer up into a higher one, and no folder of more than 15 tool modules (docs/code-layout.md describes the
layers)."""

from __future__ import annotations

import ast
import re
from collections import Counter
from pathlib import Path

from tisa_hf.commands.registry import COMMANDS

PACKAGE = Path(__file__).resolve().parents[1] / "tisa_hf"
MAX_FOLDER_MODULES = 15
MOVED_LAUNCHERS = ("tisa_hf.classify", "tisa_hf.glue", "tisa_hf.squad")
MAX_ATTENTION_MODULE_LINES = 400

# Lowest first; a module belongs to the layer of the longest prefix listed (`tisa_hf` itself: the package only).
# A module may import its own layer and those below it, never one above.
LAYERS: tuple[tuple[str, ...], ...] = (
    # the plugin
    (
        "tisa_hf",
        "tisa_hf.adapters",
        "tisa_hf.attaching",
        "tisa_hf.attention",
        "tisa_hf.config",
        "tisa_hf.counting",
        "tisa_hf.errors",
        "tisa_hf.fitting",
        "tisa_hf.integration",
        "tisa_hf.kernels",
        "tisa_hf.model_configs",
        "tisa_hf.modeling",
        "tisa_hf.names",
        "tisa_hf.packaged",
        "tisa_hf.patching",
        "tisa_hf.profiles",
        "tisa_hf.toeplitz",
    ),
    # the pieces several commands share, and the command table (strings only: it imports nothing)
    ("tisa_hf.common", "tisa_hf.commands.registry"),
    # the training recipe every training task runs
    ("tisa_hf.finetune",),
    # the commands
    (
        "tisa_hf.finetune.glue",
        "tisa_hf.finetune.squad",
        "tisa_hf.finetune.classify",
        "tisa_hf.adapt",
        "tisa_hf.embeddings",
        "tisa_hf.embeddings.retrieval",
        "tisa_hf.analysis",
        "tisa_hf.performance",
        "tisa_hf.multivector",
        "tisa_hf.context",
    ),
    # what works over finished runs of the training tasks
    ("tisa_hf.experiments",),
    # the command line (the dispatcher, the demo, the launchers), `python -m tisa_hf` and the previous release's
    # launcher names, forwarded until 0.3
    ("tisa_hf.commands", "tisa_hf.__main__", *MOVED_LAUNCHERS),
)
# The modules that run as `__main__`: `python -m tisa_hf COMMAND` and the training commands' `accelerate launch -m`
LAUNCHERS = (
    "tisa_hf.__main__",
    *MOVED_LAUNCHERS,
    *sorted(command.launcher for command in COMMANDS.values() if command.launcher),
)


def module_files() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
        modules[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return modules


def import_graph() -> dict[str, set[str]]:
    """Module -> the tisa_hf modules it imports (its own parent packages left out: importing it runs them anyway)."""
    modules = module_files()

    def known(name: str) -> str:
        while name not in modules:
            name = name.rpartition(".")[0]
        return name

    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets = set()
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                targets |= {alias.name for alias in node.names if alias.name.startswith("tisa_hf.")}
            elif isinstance(node, ast.ImportFrom):
                if node.level:
                    base = package.split(".")[: len(package.split(".")) - node.level + 1]
                    source = ".".join(base + ([node.module] if node.module else []))
                else:
                    source = node.module or ""
                if source == "tisa_hf" or source.startswith("tisa_hf."):
                    targets |= {
                        f"{source}.{alias.name}" if f"{source}.{alias.name}" in modules else source
                        for alias in node.names
                    }
        graph[module] = {
            known(target)
            for target in targets
            if known(target) != module and not module.startswith(known(target) + ".")
        }
    return graph


def layer_of(module: str) -> int:
    matches = [
        (len(prefix), index)
        for index, prefixes in enumerate(LAYERS)
        for prefix in prefixes
        if module == prefix or (prefix != "tisa_hf" and module.startswith(prefix + "."))
    ]
    assert matches, f"{module} is in no layer; add it to LAYERS"
    return max(matches)[1]


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in graph:
        if node not in index:
            visit(node)
    return found


def test_the_import_graph_has_no_cycle():
    assert cycles(import_graph()) == []


def test_no_module_imports_a_layer_above_its_own():
    upward = [
        f"{module} -> {target}"
        for module, targets in import_graph().items()
        for target in targets
        if layer_of(target) > layer_of(module)
    ]
    assert upward == []


def test_the_retrieval_runner_builds_on_the_embedding_modules_never_the_reverse():
    """embeddings/retrieval/ (the runner, its tasks) uses embeddings/ (the systems, their options, BM25, sts), which
    never imports it: a folder inside a layer imports downward too."""
    upward = [
        f"{module} -> {target}"
        for module, targets in import_graph().items()
        if module.startswith("tisa_hf.embeddings") and not module.startswith("tisa_hf.embeddings.retrieval")
        for target in targets
        if target.startswith("tisa_hf.embeddings.retrieval")
    ]
    assert upward == []


def test_nothing_imports_the_command_line_but_its_entries():
    """commands/ sits at the top: outside it, only `python -m tisa_hf` and the previous release's launcher names
    (`tisa_hf.glue`, ...) import it (the console script, `tisa_hf_cli.py`, lives outside the package), and
    `tisa-hf sweep` its command table; inside it only the launchers import the dispatcher."""
    importers = sorted(
        f"{module} -> {target}"
        for module, targets in import_graph().items()
        for target in targets
        if target.startswith("tisa_hf.commands") and not module.startswith("tisa_hf.commands")
    )
    assert importers == sorted(
        [
            "tisa_hf.__main__ -> tisa_hf.commands.cli",
            *(f"{module} -> tisa_hf.commands.cli" for module in MOVED_LAUNCHERS),
            "tisa_hf.experiments.sweep -> tisa_hf.commands.registry",
        ]
    )
    launchers = {module for module in LAUNCHERS if module.startswith("tisa_hf.commands.")}
    inside = sorted(
        f"{module} -> {target}"
        for module, targets in import_graph().items()
        if module.startswith("tisa_hf.commands.")
        for target in targets
        if target == "tisa_hf.commands.cli"
    )
    assert inside == sorted(f"{module} -> tisa_hf.commands.cli" for module in launchers)


def test_no_folder_holds_more_than_fifteen_modules():
    """Every folder and subfolder is counted, the plugin's (`attention/`, `attention/fused/`) too; the package's own
    top level is not: its modules stay where users import them from."""
    folders = Counter(
        module.rpartition(".")[0]
        for module, path in module_files().items()
        if path.name != "__init__.py" and module.count(".") > 1
    )
    assert {folder: count for folder, count in folders.items() if count > MAX_FOLDER_MODULES} == {}
    assert folders["tisa_hf.common"] and folders["tisa_hf.attention"] and folders["tisa_hf.attention.fused"]


def test_no_attention_module_passes_400_lines():
    """Every module of `attention/`, where TISA's bias meets the logits, stays one job short enough to read whole: a
    route that grows is split by job (the banded route: `banded_route.py`, and its computation in `banded/`)."""
    folder = PACKAGE / "attention"
    lines = {
        path.relative_to(folder).as_posix(): len(path.read_text(encoding="utf-8").splitlines())
        for path in folder.rglob("*.py")
    }
    assert "banded/sdpa.py" in lines and "fused/backward.py" in lines
    assert {name: count for name, count in lines.items() if count > MAX_ATTENTION_MODULE_LINES} == {}


def test_only_the_launcher_modules_run_as_main():
    """One entry per command: `tisa-hf NAME`, `python -m tisa_hf NAME`, and the `accelerate launch -m` modules of
    the training commands; a command's own module is not a second, differently behaving entry."""
    launchers = [module for module, path in module_files().items() if 'if __name__ == "__main__":' in path.read_text()]
    assert sorted(launchers) == sorted(LAUNCHERS)


# docs/code-layout.md names every module of the package by its path relative to `tisa_hf/` (`attention/blockwise.py`),
# or by its bare name (`blockwise.py`) in a list item that, itself or an item enclosing it, names the module's folder
# (`attention/`); a package's `__init__.py` is named by its folder. Every file and folder the page names exists.
CODE_LAYOUT = PACKAGE.parent / "docs" / "code-layout.md"
LIST_ITEM = re.compile(r"^( *)(?:\d+\.|-) ")
NAMED_FILE = re.compile(r"`(?:tisa_hf/)?([\w./]*?\w+\.py)`")
NAMED_FOLDER = re.compile(r"`(?:tisa_hf/)?([\w./]*\w/)`")


def layout_items() -> list[str]:
    """The page's list items and paragraphs (outside code blocks), each with the text of the items enclosing it."""
    items: list[tuple[str, int | None]] = []  # (text, index of the enclosing item)
    open_items: list[tuple[int, int]] = []  # (indent, index), outermost first
    in_code = after_blank = False
    for line in CODE_LAYOUT.read_text(encoding="utf-8").splitlines():
        if line.lstrip().startswith("```"):
            in_code = not in_code
            continue
        if in_code or not line.strip():
            after_blank = after_blank or not in_code
            continue
        match = LIST_ITEM.match(line)
        if match:
            indent = len(match.group(1))
            while open_items and not 0 <= open_items[-1][0] < indent:  # a paragraph (-1) encloses no item
                open_items.pop()
            items.append((line, open_items[-1][1] if open_items else None))
            open_items.append((indent, len(items) - 1))
        elif open_items and (line.startswith(" ") or not after_blank):
            index = open_items[-1][1]
            items[index] = (items[index][0] + " " + line.strip(), items[index][1])
        else:
            items.append((line, None))
            open_items = [(-1, len(items) - 1)]
        after_blank = False

    def with_enclosing(index: int | None) -> str:
        return "" if index is None else items[index][0] + " " + with_enclosing(items[index][1])

    return [with_enclosing(index) for index in range(len(items))]


def folders_named(text: str) -> set[str]:
    """The package folders a text names: `finetune/glue/`, or `classify/` for every folder of that name."""
    folders = {
        path.relative_to(PACKAGE).as_posix() + "/"
        for path in PACKAGE.rglob("*")
        if path.is_dir() and path.name != "__pycache__"
    }
    return {
        folder
        for name in NAMED_FOLDER.findall(text)
        for folder in folders
        if folder == name or folder.endswith("/" + name)
    }


def test_the_code_layout_page_names_every_module():
    """A new module is named on the page, in the item of its folder, in the same change that adds it."""
    named: set[str] = set()
    for text in layout_items():
        for name in NAMED_FILE.findall(text):
            named.add(name)
            named |= {folder + name for folder in folders_named(text)}
    modules = sorted(
        path.relative_to(PACKAGE).as_posix()
        for path in PACKAGE.rglob("*.py")
        if path.name != "__init__.py" and "__pycache__" not in path.parts
    )
    assert [module for module in modules if module not in named] == []


def test_the_code_layout_page_names_only_files_and_folders_that_exist():
    """A named file exists in the package (a bare name in a folder the item names, or in the package itself) or, as a
    path, in the repository; a named folder exists in the package or the repository."""
    repository = PACKAGE.parent
    missing = []
    for text in layout_items():
        folders = folders_named(text)
        for name in NAMED_FILE.findall(text):
            places = [PACKAGE / name, repository / name] + [PACKAGE / folder / name for folder in folders]
            if not any(place.is_file() for place in places):
                missing.append(name)
        for name in NAMED_FOLDER.findall(text):
            if not (folders_named(f"`{name}`") or (repository / name).is_dir()):
                missing.append(name)
    assert sorted(set(missing)) == []
