"""The package's import graph (every `tisa_hf` import, lazy ones inside functions included): no cycle, no arrow from
a lower layer up into a higher one, and no folder of more than 15 tool modules (docs/code-layout.md describes the
layers)."""

from __future__ import annotations

import ast
from collections import Counter
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "tisa_hf"
MAX_FOLDER_MODULES = 15

# Lowest first; a module belongs to the layer of the longest prefix listed (`tisa_hf` itself: the package only).
# A module may import its own layer and those below it, never one above.
LAYERS: tuple[tuple[str, ...], ...] = (
    # the plugin
    (
        "tisa_hf",
        "tisa_hf.adapters",
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
    # the pieces several commands share
    ("tisa_hf.common", "tisa_hf.cli_options"),
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
        "tisa_hf.demo",
        "tisa_hf.multivector",
    ),
    # what works over finished runs of the training tasks
    ("tisa_hf.experiments",),
    # the command line and the `python -m` entries
    (
        "tisa_hf.cli",
        "tisa_hf.__main__",
        "tisa_hf.glue",
        "tisa_hf.squad",
        "tisa_hf.classify",
        "tisa_hf.adapt.__main__",
    ),
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


def test_no_command_imports_the_command_line():
    dispatcher = [module for module, targets in import_graph().items() if "tisa_hf.cli" in targets]
    assert sorted(dispatcher) == [
        "tisa_hf.__main__",
        "tisa_hf.adapt.__main__",
        "tisa_hf.classify",
        "tisa_hf.glue",
        "tisa_hf.squad",
    ]


def test_no_folder_holds_more_than_fifteen_modules():
    """The plugin's own modules (the first layer) stay where users import them from, and are not counted."""
    folders = Counter(
        module.rpartition(".")[0]
        for module, path in module_files().items()
        if path.name != "__init__.py" and layer_of(module) > 0
    )
    assert {folder: count for folder, count in folders.items() if count > MAX_FOLDER_MODULES} == {}


def test_only_the_launcher_modules_run_as_main():
    """One entry per command: `tisa-hf NAME`, `python -m tisa_hf NAME`, and the `accelerate launch -m` modules of
    the training commands; a command's own module is not a second, differently behaving entry."""
    launchers = [module for module, path in module_files().items() if 'if __name__ == "__main__":' in path.read_text()]
    assert sorted(launchers) == sorted(LAYERS[-1])
