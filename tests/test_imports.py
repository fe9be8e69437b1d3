"""TISA's registrations reach transformers whichever is imported first, tisa_hf or transformers' model code.
Each check runs in a fresh interpreter."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
from transformers import AutoModelForSequenceClassification

import tisa_hf
from tests.fixtures import TINY_SIZES, tiny_config

pytestmark = pytest.mark.core

ROOT = Path(__file__).resolve().parents[1]


def run_python(code: str) -> str:
    completed = subprocess.run(
        [sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300, check=False
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    return completed.stdout.strip().splitlines()[-1]


@pytest.fixture(scope="module")
def tisa_checkpoint(tmp_path_factory):
    path = tmp_path_factory.mktemp("tisa")
    config = tisa_hf.tisa_model_config(
        tiny_config("bert", num_labels=2), tisa_hf.TisaConfig(num_kernels=2, init="random")
    )
    AutoModelForSequenceClassification.from_config(config).save_pretrained(path)
    return path


@pytest.mark.parametrize(
    "imports",
    [
        "import tisa_hf\nfrom transformers import AutoModelForSequenceClassification",
        "from transformers import AutoModelForSequenceClassification\nimport tisa_hf",
        "import tisa_hf\nfrom transformers.models.bert.modeling_bert import BertModel\n"
        "from transformers import AutoModelForSequenceClassification",
        "import tisa_hf\nfrom transformers import AutoConfig\n"
        "assert type(AutoConfig.from_pretrained(PATH)).__name__ == 'TisaBertConfig'\n"
        "from transformers import AutoModelForSequenceClassification",
    ],
)
def test_tisa_checkpoints_load_whatever_is_imported_first(imports, tisa_checkpoint):
    code = imports.replace("PATH", repr(str(tisa_checkpoint))) + (
        f"\nmodel = AutoModelForSequenceClassification.from_pretrained({str(tisa_checkpoint)!r})"
        "\nsite = model.bert.encoder.layer[0].attention.self"
        "\nprint(type(model).__name__, model.config._attn_implementation, site.config._attn_implementation,"
        " tisa_hf.tisa_config_of(model).num_kernels)"
    )
    assert run_python(code) == "TisaBertForSequenceClassification sdpa tisa_sdpa 2"


def test_patch_works_when_only_model_code_was_imported():
    code = (
        "import tisa_hf\nfrom transformers.models.bert.modeling_bert import BertConfig, BertModel\n"
        f"model = BertModel(BertConfig(**{TINY_SIZES!r}))\n"
        "tisa_hf.patch(model, tisa_hf.TisaConfig(num_kernels=2, init='random'))\n"
        "site = model.encoder.layer[0].attention.self\n"
        "print(type(model).__name__, model.config.model_type, model.config._attn_implementation,"
        " site.config._attn_implementation)"
    )
    assert run_python(code) == "TisaBertModel tisa_hf_bert sdpa tisa_sdpa"
