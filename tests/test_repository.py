"""Files the README's commands write inside the repository stay out of git, docs/results holds results and not what a
rerun rebuilds, and what the README says of the repository (the size of the test suite) holds."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "docs" / "results"
MAX_RESULT_FILE_BYTES = 2**20
MAX_RESULTS_BYTES = 25 * 2**20
# The files of docs/results over MAX_RESULT_FILE_BYTES, each with why it is kept there: what a results page's numbers
# are computed from and no rerun gives back cheaply. What a rerun rebuilds (document embeddings, score matrices) goes
# to the --work folder of the command that writes it, under runs/ (ignored).
LARGE_RESULT_FILES = {
    "longdoc/qmsum-minilm/qmsum-scores.npz": "QMSum's score matrices of BM25, late:chunk:minilm and late:s5-all "
    "(compressed), which scripts/qmsum_candidates.py computes the re-ranking and convex-fusion tables and their paired "
    "intervals from; a rerun costs hours of late interaction",
    **{
        f"longdoc/qmsum-passages-minilm/w{window}/qmsum-passages.json": "the record of the QMSum passage cells at "
        f"W = {window}: every system's per-query measures of 1,332 queries in two settings, which the paired "
        "intervals of section 2d are computed from"
        for window in (128, 256, 512)
    },
}


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git checkout")
def test_demo_output_folder_is_ignored():
    completed = subprocess.run(["git", "check-ignore", "-q", "tisa-demo/summary.json"], cwd=ROOT, check=False)
    assert completed.returncode == 0


def test_the_readme_gives_the_size_of_the_suite_within_a_tenth():
    stated = int(
        re.search(r"About ([\d,]+) tests", (ROOT / "README.md").read_text(encoding="utf-8"))[1].replace(",", "")
    )
    completed = subprocess.run(
        # transformers' common model tests (`tests/test_peer_suite.py`) count apart: their number is transformers'.
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-m", "", "--ignore=tests/test_peer_suite.py"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=True,
    )
    collected = int(re.search(r"^(\d+) tests collected", completed.stdout, re.M)[1])
    assert abs(collected - stated) <= collected / 10, f"the README says about {stated} tests; there are {collected}"


def test_no_file_over_a_mebibyte_lands_in_docs_results_unless_listed_with_its_reason():
    large = {
        path.relative_to(RESULTS).as_posix(): path.stat().st_size
        for path in RESULTS.rglob("*")
        if path.is_file() and path.stat().st_size > MAX_RESULT_FILE_BYTES
    }
    unlisted = {name: size for name, size in large.items() if name not in LARGE_RESULT_FILES}
    assert unlisted == {}, (
        "docs/results holds results: move what a rerun rebuilds to runs/ (the command's --work), compress what a page "
        "needs, or list the file in LARGE_RESULT_FILES with its reason"
    )
    assert sorted(name for name in LARGE_RESULT_FILES if name not in large) == [], "a listed file is gone or small"


def test_docs_results_stays_under_25_mebibytes():
    total = sum(path.stat().st_size for path in RESULTS.rglob("*") if path.is_file())
    assert total <= MAX_RESULTS_BYTES, f"docs/results holds {total / 2**20:.1f} MiB"
