"""Model cards of run directories, what `push_run` hands to huggingface_hub, and what `tisa-hf push` says when an
upload cannot work (no network: the Hub calls are replaced)."""

import importlib
import json
import shutil
from pathlib import Path

import huggingface_hub
import pytest
import torch
from huggingface_hub import HfApi, ModelCard, errors
from huggingface_hub.utils import filter_repo_objects
from PIL import Image
from transformers import AutoTokenizer, BertForSequenceClassification

import tisa_hf
from tests.fixtures import TINY, WORD_PIECE_SIZES, tiny_config
from tisa_hf.commands import cli
from tisa_hf.errors import UsageError
from tisa_hf.finetune import push
from tisa_hf.packaged import MINILM_HUB_ID

push_main = cli.entry("push")  # `tisa-hf push`

MINILM = tisa_hf.minilm_path()
LAYERS, HEADS, HIDDEN = WORD_PIECE_SIZES["num_hidden_layers"], TINY["num_attention_heads"], TINY["hidden_size"]
POSITIONS, KERNELS = 64, 3
METRICS = {"accuracy": 0.6823104693140795, "f1": 0.7012, "loss": 0.61}


def _tiny_bert(tisa):
    torch.manual_seed(0)
    config = tiny_config("bert", **WORD_PIECE_SIZES, max_position_embeddings=POSITIONS, num_labels=2)
    model = BertForSequenceClassification(config)
    return tisa_hf.patch(model, tisa) if tisa else model


def _run_dir(path: Path, tisa=None, base_model="google-bert/bert-base-uncased") -> Path:
    model = _tiny_bert(tisa)
    model.save_pretrained(path)
    AutoTokenizer.from_pretrained(MINILM).save_pretrained(path)
    record = {
        "config": {"task": "RTE", "model": base_model, "learning_rate": 3e-5},
        "seed": 13,
        "metrics": METRICS,
        "versions": {"transformers": "5.23.0", "torch": torch.__version__},
        "wall_time_s": 123.4,
    }
    (path / "metrics.json").write_text(json.dumps(record), encoding="utf-8")
    checkpoint = path / "checkpoint-100"
    checkpoint.mkdir()
    model.save_pretrained(checkpoint)
    (checkpoint / "optimizer.bin").write_bytes(b"state")
    (path / "runs").mkdir()
    (path / "runs" / "events.out.tfevents.1.host").write_bytes(b"log")
    (path / "optimizer.bin").write_bytes(b"state")
    return path


@pytest.fixture(scope="module")
def run_dir(tmp_path_factory):
    tisa = tisa_hf.TisaConfig(num_kernels=KERNELS, mode="add", init="random", fit_window=16)
    return _run_dir(tmp_path_factory.mktemp("run"), tisa)


def test_card_metadata_carries_the_dev_metrics(run_dir):
    card = push.build_model_card(run_dir, repo_id="someone/bert-tisa-rte")
    reparsed = ModelCard(card.content)  # what the Hub will read back
    data = reparsed.data
    assert data.base_model == "google-bert/bert-base-uncased"
    assert data.library_name == "transformers"
    assert "tisa" in data.tags and "rte" in data.tags
    assert data.datasets == ["nyu-mll/glue"]
    results = {result.metric_type: result for result in data.eval_results}
    assert {name: result.metric_value for name, result in results.items()} == METRICS
    assert {(r.dataset_type, r.dataset_config, r.dataset_split, r.task_type) for r in results.values()} == {
        ("nyu-mll/glue", "rte", "validation", "text-classification")
    }
    assert data.model_name == "someone/bert-tisa-rte"


def test_card_reads_metrics_recorded_per_split_as_runs_record_them(tmp_path):
    # tisa-hf glue records {"validation": {...}}; MNLI two dev splits. Each becomes its own model-index entry.
    dataset, results = push.eval_results(
        "mnli", {"validation_matched": {"accuracy": 0.8}, "validation_mismatched": {"accuracy": 0.81}}
    )
    assert dataset == "nyu-mll/glue"
    assert [(r.dataset_split, r.metric_type, r.metric_value) for r in results] == [
        ("validation_matched", "accuracy", 0.8),
        ("validation_mismatched", "accuracy", 0.81),
    ]
    _, results = push.eval_results(
        "squad_v2", {"validation": {"exact": 70.0, "f1": 73.0, "total": 100, "best_f1_thresh": 0.0}}
    )
    assert [(r.dataset_split, r.metric_type, r.metric_value) for r in results] == [
        ("validation", "exact", 70.0),
        ("validation", "f1", 73.0),
    ]


def test_card_body_sections(run_dir):
    text = push.build_model_card(run_dir, repo_id="someone/bert-tisa-rte").text
    for heading in ("## Model", "## TISA settings", "## Positional parameters", "## Scoring functions"):
        assert heading in text
    assert "| num_kernels | `3` |" in text and "| mode | `add` |" in text
    tisa = 3 * KERNELS * HEADS * LAYERS  # a, b, c per kernel, head and layer
    table = POSITIONS * HIDDEN
    assert f"| this model | {tisa} | {table} | {tisa + table} |" in text
    assert f"| unpatched base model | 0 | {table} | {table} |" in text
    assert "| validation | accuracy | 0.6823 |" in text
    assert "Task: RTE, dev set (seed 13, wall time of training and evaluation 123 s)." in text
    assert "import tisa_hf" in text and "only its mean reaches the model" not in text
    assert 'AutoModelForSequenceClassification.from_pretrained("someone/bert-tisa-rte")' in text
    assert text.index("import tisa_hf") < text.index("from_pretrained")


def test_kernel_plot_is_written_and_linked(run_dir):
    text = push.build_model_card(run_dir).text
    assert f"![TISA scoring functions]({push.KERNEL_PLOT})" in text
    with Image.open(run_dir / push.KERNEL_PLOT) as image:
        assert image.format == "PNG" and image.width > 100


def test_card_says_when_the_wall_time_is_unknown(tmp_path):
    run = _run_dir(tmp_path / "run")
    record = json.loads((run / "metrics.json").read_text())
    (run / "metrics.json").write_text(json.dumps({**record, "wall_time_s": None}))
    text = push.build_model_card(run).text
    assert "(seed 13, wall time of training and evaluation unknown)." in text


def test_loading_snippet_reloads_the_model(run_dir):
    counts = tisa_hf.count_positional_parameters(push.load_run_model(run_dir))
    assert counts.tisa == 3 * KERNELS * HEADS * LAYERS


def test_replace_mode_counts_one_position_vector(tmp_path):
    run = _run_dir(tmp_path, tisa_hf.TisaConfig(num_kernels=1, mode="replace", init="zeros"))
    text = push.build_model_card(run).text
    tisa = 3 * HEADS * LAYERS
    assert f"| this model | {tisa} | {HIDDEN} | {tisa + HIDDEN} |" in text
    assert f"| unpatched base model | 0 | {POSITIONS * HIDDEN} |" in text
    assert "only its mean reaches the model" in text


def test_baseline_run_has_no_plot(tmp_path):
    run = _run_dir(tmp_path)
    text = push.build_model_card(run).text
    assert "None: this run is the unpatched baseline." in text and "## Scoring functions" not in text
    assert not (run / push.KERNEL_PLOT).exists()


def test_metrics_file_problems_are_named(tmp_path):
    with pytest.raises(UsageError, match="metrics.json not found"):
        push.build_model_card(tmp_path)
    (tmp_path / "metrics.json").write_text(json.dumps({"config": {"task": "RTE"}, "seed": 1}), encoding="utf-8")
    with pytest.raises(ValueError, match="lacks metrics, versions, wall_time_s"):
        push.build_model_card(tmp_path)


def test_push_uploads_model_files_but_no_checkpoints(run_dir, monkeypatch):
    calls = {}
    monkeypatch.setattr(
        HfApi, "create_repo", lambda self, repo_id, **kwargs: calls.setdefault("create", (repo_id, kwargs))
    )
    monkeypatch.setattr(HfApi, "upload_folder", lambda self, **kwargs: calls.setdefault("upload", kwargs))

    push.push_run(run_dir, "someone/bert-tisa-rte", private=True)

    assert calls["create"] == ("someone/bert-tisa-rte", {"private": True, "exist_ok": True})
    upload = calls["upload"]
    assert upload["repo_id"] == "someone/bert-tisa-rte" and Path(upload["folder_path"]) == run_dir
    assert "someone/bert-tisa-rte" in (run_dir / "README.md").read_text(encoding="utf-8")
    listing = sorted(p.relative_to(run_dir).as_posix() for p in run_dir.rglob("*") if p.is_file())
    uploaded = set(
        filter_repo_objects(listing, allow_patterns=upload["allow_patterns"], ignore_patterns=upload["ignore_patterns"])
    )
    assert {
        "model.safetensors",
        "config.json",
        "tokenizer.json",
        "README.md",
        push.KERNEL_PLOT,
        "metrics.json",
    } <= uploaded
    assert not any(name.startswith(("checkpoint-", "runs/")) for name in uploaded)
    assert "optimizer.bin" not in uploaded
    assert "checkpoint-100/model.safetensors" in listing  # the checkpoint exists, and is left out


def test_cli_passes_arguments(run_dir, monkeypatch):
    monkeypatch.setenv("HF_TOKEN", "hf_test")
    seen = {}
    monkeypatch.setattr(push, "push_run", lambda run, repo, private: seen.update(run=run, repo=repo, private=private))
    assert push_main([str(run_dir), "someone/x", "--private"]) == 0
    assert seen == {"run": run_dir, "repo": "someone/x", "private": True}


def test_card_names_the_hub_id_of_the_base_model(tmp_path):
    card = push.build_model_card(_run_dir(tmp_path / "minilm-run", base_model="minilm"), repo_id="someone/x")
    assert ModelCard(card.content).data.base_model == MINILM_HUB_ID == "sentence-transformers/all-MiniLM-L6-v2"
    assert f"- Base model: `{MINILM_HUB_ID}`" in card.text
    named, unnamed = tmp_path / "named", tmp_path / "unnamed"
    for folder, origin in ((named, "google-bert/bert-base-uncased"), (unnamed, "/home/me/models/bert")):
        folder.mkdir()
        (folder / "config.json").write_text(json.dumps({"model_type": "bert", "_name_or_path": origin}))
    assert push.base_model_id(str(named)) == "google-bert/bert-base-uncased"
    assert push.base_model_id(str(unnamed)) is None
    assert push.base_model_id(str(tmp_path)) is None  # a folder without config.json
    assert push.base_model_id("albert/albert-base-v2") == "albert/albert-base-v2"
    local = push.build_model_card(_run_dir(tmp_path / "local-run", base_model=str(unnamed)))
    assert ModelCard(local.content).data.base_model is None


def _connection_error():
    """What the Hub's HTTP client raises without a network."""
    return importlib.import_module(errors.HTTPError.__module__).ConnectError("[Errno -2] Name or service not known")


def _unauthorized():
    client = importlib.import_module(errors.HTTPError.__module__)
    response = client.Response(401, request=client.Request("POST", "https://huggingface.co/api/repos/create"))
    return errors.HfHubHTTPError("401 Client Error: Unauthorized", response=response)


@pytest.mark.parametrize(
    ("error", "reason"),
    [
        (_connection_error, "the Hugging Face Hub is unreachable ([Errno -2] Name or service not known)"),
        (
            _unauthorized,
            "the Hub refused the token (401 Client Error: Unauthorized); log in with `hf auth login` or set HF_TOKEN",
        ),
    ],
)
def test_failed_push_is_one_line_with_the_retry_command(run_dir, monkeypatch, capsys, error, reason):
    monkeypatch.setenv("HF_TOKEN", "hf_test")

    def fail(self, *args, **kwargs):
        raise error()

    monkeypatch.setattr(HfApi, "create_repo", fail)
    assert cli.main(["push", str(run_dir), "someone/x"]) == 2
    err = capsys.readouterr().err
    assert err == (
        f"tisa-hf push: Uploading {run_dir} to someone/x failed: {reason}. The run is saved in {run_dir}; retry "
        f"with `tisa-hf push {run_dir} someone/x`.\n"
    )


def test_push_checks_what_it_can_before_building_the_card(run_dir, monkeypatch, capsys):
    monkeypatch.setattr(push, "build_model_card", lambda *args, **kwargs: 1 / 0)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    assert push_main([str(run_dir), "someone/x"]) == 2
    assert (
        capsys.readouterr().err
        == "tisa-hf push: HF_HUB_OFFLINE is set, so nothing can be uploaded to someone/x; unset it.\n"
    )
    assert push_main([str(run_dir), "some one/x"]) == 2
    assert capsys.readouterr().err.startswith("tisa-hf push: 'some one/x' is not a Hub repository id (")


def test_push_names_a_wrong_run_folder_before_the_upload_target(run_dir, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)  # the target is refused too, later
    assert push_main([str(tmp_path / "missing"), "someone/x"]) == 2
    assert capsys.readouterr().err == (
        f"tisa-hf push: {tmp_path / 'missing'} is not a folder; give a run directory (saved model, tokenizer, "
        "metrics.json).\n"
    )
    damaged = shutil.copytree(run_dir, tmp_path / "damaged")
    weights = damaged / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:1000])
    assert push_main([str(damaged), "someone/x"]) == 2
    error = capsys.readouterr().err
    assert error.startswith(f"tisa-hf push: {weights} is damaged or incomplete (") and error.count("\n") == 1


def test_card_names_the_machine_the_run_recorded(tmp_path):
    run = _run_dir(tmp_path / "run")
    record = json.loads((run / "metrics.json").read_text())
    machine = {"device": "cuda", "gpu": "NVIDIA H200", "processor": "Intel Xeon", "cpu_count": 16, "torch_threads": 16}
    (run / "metrics.json").write_text(json.dumps({**record, "machine": machine}))
    text = push.build_model_card(run).text
    assert "(seed 13, wall time of training and evaluation 123 s on cuda (NVIDIA H200))." in text
