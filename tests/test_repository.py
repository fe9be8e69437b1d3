"""Files the README's commands write inside the repository stay out of git, and what the README says of the
repository (the size of the test suite) holds."""

import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


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
