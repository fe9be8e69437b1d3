"""`scripts/segment_agreement.py` on tiny random BERTs and a generated MRPC folder, against a direct computation."""

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from transformers import AutoModel, AutoTokenizer

import tisa_hf
from tests.fixtures import load_script, write_glue_tsv, write_tiny_model
from tisa_hf.finetune.glue.data import load_glue
from tisa_hf.finetune.task_tables import get_task


@pytest.fixture(scope="module")
def script():
    return load_script("segment_agreement")


@pytest.fixture(scope="module")
def workspace(tmp_path_factory):
    root = tmp_path_factory.mktemp("segments")
    write_tiny_model(root / "teacher", seed=0)
    tisa = tisa_hf.TisaConfig(num_kernels=2, mode="replace", fit_window=8)
    AutoModel.from_pretrained(root / "teacher", tisa=tisa).save_pretrained(root / "student")
    write_glue_tsv(root / "glue" / "MRPC", "mrpc", train_rows=4, dev_rows=12)
    return root


def direct_agreement(root: Path, name: str) -> dict[str, float]:
    """The four measures written out: each token's cosine to the teacher, averaged over the tokens each covers."""
    task = get_task("mrpc")
    dev = load_glue(task, data_dir=str(root / "glue"))["validation"]
    tokenizer = AutoTokenizer.from_pretrained(root / "teacher")
    teacher, model = (AutoModel.from_pretrained(root / folder).eval() for folder in ("teacher", name))
    totals = {"first segment": [], "second segment": [], "[CLS]": [], "second alone": []}
    with torch.no_grad():
        for first, second in zip(*(dev[column] for column in task.text_columns), strict=True):
            pair = tokenizer(first, second, return_tensors="pt")
            cosine = F.cosine_similarity(model(**pair).last_hidden_state, teacher(**pair).last_hidden_state, dim=-1)[0]
            types = pair["token_type_ids"][0]
            totals["first segment"] += cosine[types == 0].tolist()
            totals["second segment"] += cosine[types == 1].tolist()
            totals["[CLS]"].append(cosine[0].item())
            alone = tokenizer(second, return_tensors="pt")
            totals["second alone"] += F.cosine_similarity(
                model(**alone).last_hidden_state, teacher(**alone).last_hidden_state, dim=-1
            )[0].tolist()
    return {measure: sum(values) / len(values) for measure, values in totals.items()}


def test_agreement_and_paired_differences_match_a_direct_computation(script, workspace, tmp_path, capsys):
    teacher, student = str(workspace / "teacher"), str(workspace / "student")
    out = tmp_path / "agreement.json"
    argv = ["mrpc", teacher, student, "--teacher", teacher, "--data-dir", str(workspace / "glue")]
    assert script.main([*argv, "--paired", teacher, "--batch-size", "5", "--out", str(out)]) == 0
    record = json.loads(out.read_text())

    assert record["dev_pairs"] == 12
    assert record["models"][teacher]["agreement"] == pytest.approx(dict.fromkeys(script.MEASURES, 1.0), abs=1e-6)
    expected = direct_agreement(workspace, "student")
    assert record["models"][student]["agreement"] == pytest.approx(expected, abs=1e-5)
    assert min(expected.values()) < 0.99  # the replace model really differs from its teacher

    differences = record["paired"]["differences"][student]
    for measure in script.MEASURES:
        difference = differences[measure]
        assert difference["difference"] == pytest.approx(expected[measure] - 1.0, abs=1e-5)
        assert difference["low"] <= difference["difference"] <= difference["high"]
    table = capsys.readouterr().out
    assert f"| {student} | {expected['first segment']:.3f} ({expected['first segment'] - 1:+.3f} [" in table


def test_a_single_sentence_task_is_refused_before_any_model_loads(script, capsys):
    assert script.main(["cola", "no-such-model", "--teacher", "no-such-teacher"]) == 2
    expected = "segment_agreement: cola is a single-sentence task; this script measures sentence pairs.\n"
    assert capsys.readouterr().err == expected


def test_paired_must_name_one_of_the_models(script, capsys):
    with pytest.raises(SystemExit):
        script.main(["mrpc", "a", "b", "--paired", "c"])
    assert capsys.readouterr().err.endswith("error: --paired c is not one of the models\n")


@pytest.mark.parametrize("option", ["--batch-size", "--max-length"])
def test_a_count_below_one_is_refused_by_the_parser(script, option, capsys):
    with pytest.raises(SystemExit):
        script.main(["mrpc", "a", option, "0"])
    assert capsys.readouterr().err.endswith(f"error: argument {option}: must be at least 1, got 0\n")
