"""Files the README's commands write inside the repository stay out of git."""

import shutil
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("git") is None or not (ROOT / ".git").exists(), reason="not a git checkout")
def test_demo_output_folder_is_ignored():
    completed = subprocess.run(["git", "check-ignore", "-q", "tisa-demo/summary.json"], cwd=ROOT, check=False)
    assert completed.returncode == 0
