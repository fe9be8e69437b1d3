"""Loading, saving, patching, modes and errors of the TISA integration."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch
from transformers import AutoModel, AutoModelForSequenceClassification, GPT2Config

import tisa_hf
from tests.fixtures import tiny_config
from tisa_hf import attaching
from tisa_hf.adapters import ADAPTERS

pytestmark = pytest.mark.core


def forbid_fitting(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("the kernels were refitted")

    monkeypatch.setattr(attaching, "fit_kernels", refuse)
    monkeypatch.setattr(attaching, "extract_positional_profiles", refuse)


def test_save_and_reload_restores_tisa_without_refitting(model_type, tmp_path, monkeypatch):
    plain = AutoModelForSequenceClassification.from_config(tiny_config(model_type, num_labels=3))
    plain.save_pretrained(tmp_path / "plain")
    model = AutoModelForSequenceClassification.from_pretrained(
        tmp_path / "plain", tisa=tisa_hf.TisaConfig(num_kernels=2, mode="replace")
    ).eval()
    model.save_pretrained(tmp_path / "tisa")
    saved = json.loads((tmp_path / "tisa" / "config.json").read_text())
    assert saved["tisa"]["num_kernels"] == 2 and saved["tisa"]["mode"] == "replace"

    forbid_fitting(monkeypatch)
    again = AutoModelForSequenceClassification.from_pretrained(tmp_path / "tisa").eval()
    assert tisa_hf.tisa_config_of(again) == tisa_hf.TisaConfig(num_kernels=2, mode="replace")
    input_ids = torch.randint(3, 99, (2, 11))
    with torch.no_grad():
        torch.testing.assert_close(again(input_ids=input_ids).logits, model(input_ids=input_ids).logits, rtol=0, atol=0)
    torch.testing.assert_close(again.base_model.tisa.center, model.base_model.tisa.center, rtol=0, atol=0)


def test_converting_a_plain_checkpoint_initialises_the_kernels_by_init(tmp_path):
    AutoModel.from_config(tiny_config("bert")).save_pretrained(tmp_path)
    model, info = AutoModel.from_pretrained(
        tmp_path, tisa={"num_kernels": 3, "init": "zeros", "fit_window": 8}, output_loading_info=True
    )
    assert not any("tisa" in key for key in info["missing_keys"])
    assert model.tisa.amplitude.abs().max() == 0
    torch.testing.assert_close(model.tisa.center[0, 0], torch.linspace(-8, 8, 3))


def test_from_pretrained_fits_kernels_to_the_pretrained_weights(tmp_path):
    AutoModel.from_config(tiny_config("roberta")).save_pretrained(tmp_path)
    model = AutoModel.from_pretrained(tmp_path, tisa={"num_kernels": 2, "fit_window": 10})
    profiles = tisa_hf.extract_positional_profiles(model)
    fit = tisa_hf.fit_kernels(profiles.toeplitz.profile, 2, window=10)
    torch.testing.assert_close(model.tisa.amplitude, fit.amplitude)
    torch.testing.assert_close(model.tisa.sharpness, fit.sharpness)


def test_patch_in_memory_matches_loading_with_the_flag(tmp_path):
    AutoModel.from_config(tiny_config("albert")).save_pretrained(tmp_path)
    loaded = AutoModel.from_pretrained(tmp_path, tisa={"num_kernels": 3, "fit_window": 6})
    patched = tisa_hf.patch(AutoModel.from_pretrained(tmp_path), tisa_hf.TisaConfig(num_kernels=3, fit_window=6))
    assert patched.config.tisa == loaded.config.tisa
    torch.testing.assert_close(patched.tisa.amplitude, loaded.tisa.amplitude)
    with pytest.raises(ValueError, match="already has TISA"):
        tisa_hf.patch(patched, {"num_kernels": 1})


def test_bag_of_words_is_permutation_equivariant(model_type):
    config = tiny_config(model_type, tisa={"num_kernels": 0, "mode": "replace"})
    model = AutoModel.from_config(config).eval()
    assert getattr(model, "tisa", None) is None
    input_ids = torch.randint(3, 99, (2, 10))
    permutation = torch.randperm(10)
    with torch.no_grad():
        out = model(input_ids=input_ids).last_hidden_state
        permuted = model(input_ids=input_ids[:, permutation]).last_hidden_state
    torch.testing.assert_close(permuted, out[:, permutation], atol=1e-5, rtol=1e-5)


def test_add_mode_is_not_permutation_equivariant():
    """The permutation test above can fail: position information breaks it."""
    model = AutoModel.from_config(tiny_config("bert", tisa={"num_kernels": 0})).eval()
    input_ids = torch.randint(3, 99, (2, 10))
    permutation = torch.randperm(10)
    with torch.no_grad():
        out = model(input_ids=input_ids).last_hidden_state
        permuted = model(input_ids=input_ids[:, permutation]).last_hidden_state
    assert not torch.allclose(permuted, out[:, permutation], atol=1e-4)


def test_replace_mode_runs_four_times_the_position_table(model_type):
    config = tiny_config(model_type, tisa={"num_kernels": 2, "mode": "replace", "init": "random"})
    model = AutoModelForSequenceClassification.from_config(config).eval()
    length = 4 * 40
    input_ids = torch.randint(3, 99, (2, length))
    mask = torch.ones_like(input_ids)
    mask[1, length // 2 :] = 0
    with torch.no_grad():
        logits = model(input_ids=input_ids, attention_mask=mask).logits
    assert logits.shape == (2, 2) and torch.isfinite(logits).all()


def test_add_mode_rejects_inputs_longer_than_the_position_table(model_type):
    model = AutoModel.from_config(tiny_config(model_type, tisa={"num_kernels": 1, "init": "zeros"}))
    with pytest.raises(ValueError, match=r"41 tokens but the position table holds 40.*mode='replace'"):
        model(input_ids=torch.randint(3, 99, (1, 41)))


def test_replace_mode_uses_the_mean_of_the_rows_tokens_use():
    config = tiny_config("roberta", tisa={"num_kernels": 0, "mode": "replace"})
    model = AutoModel.from_config(config).eval()
    table = model.embeddings.position_embeddings.weight
    looked_up = model.embeddings.position_embeddings(torch.tensor([[0, 5, 41]]))
    torch.testing.assert_close(looked_up, table[2:].mean(0).expand(1, 3, -1))
    assert not torch.allclose(table[2:].mean(0), table.mean(0))


@pytest.mark.parametrize(
    ("model_type", "layers", "heads", "kernels", "shared", "expected"),
    [
        ("bert", 3, 4, 5, False, 3 * 5 * 4 * 3),
        ("albert", 4, 4, 3, False, 3 * 3 * 4 * 4),
        ("albert", 4, 4, 3, True, 36),
        ("electra", 2, 4, 5, False, 3 * 5 * 4 * 2),
        ("xlm-roberta", 3, 2, 1, False, 3 * 1 * 2 * 3),
        ("distilbert", 3, 4, 2, False, 3 * 2 * 4 * 3),
    ],
)
def test_positional_parameter_counts(model_type, layers, heads, kernels, shared, expected):
    config = tiny_config(model_type, num_hidden_layers=layers, num_attention_heads=heads)
    plain = AutoModel.from_config(copy.deepcopy(config))
    embedding = config.embedding_size if model_type in ("albert", "electra") else config.hidden_size
    rows = config.max_position_embeddings
    before = tisa_hf.count_positional_parameters(plain)
    assert (before.tisa, before.position_embeddings) == (0, rows * embedding)
    tisa_hf.patch(plain, {"num_kernels": kernels, "init": "zeros", "share_across_layers": shared})
    after = tisa_hf.count_positional_parameters(plain)
    assert (after.tisa, after.position_embeddings) == (expected, rows * embedding)
    assert tisa_hf.TisaConfig(num_kernels=kernels, share_across_layers=shared).num_parameters(layers, heads) == expected
    replaced = tisa_hf.patch(
        AutoModel.from_config(copy.deepcopy(config)), {"num_kernels": kernels, "mode": "replace", "init": "zeros"}
    )
    assert tisa_hf.count_positional_parameters(replaced).position_embeddings == embedding


def test_paper_parameter_count_for_a_12_by_12_model():
    assert tisa_hf.TisaConfig(num_kernels=5).num_parameters(12, 12) == 2160


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ({"num_kernels": -1}, "num_kernels must be an integer >= 0, got -1"),
        ({"mode": "concat"}, "mode must be one of add, replace; got 'concat'"),
        ({"init": "ones"}, "init must be one of fit, zeros, random; got 'ones'"),
        ({"fit_window": 0}, "fit_window must be a positive integer or None"),
        ({"kernels": 3}, "Unknown TisaConfig field(s) kernels"),
        ("yes", "tisa= takes a tisa_hf.TisaConfig, a dict of its fields or True; got str"),
    ],
)
def test_bad_tisa_configs_are_rejected_with_the_field_named(value, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(").replace(")", r"\)")):
        tisa_hf.TisaConfig.from_value(value)


def test_bad_config_is_rejected_at_from_pretrained(tmp_path):
    AutoModel.from_config(tiny_config("bert")).save_pretrained(tmp_path)
    with pytest.raises(ValueError, match="mode must be one of add, replace"):
        AutoModel.from_pretrained(tmp_path, tisa={"mode": "prepend"})


def test_unsupported_model_type_names_the_supported_ones():
    config = GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=10, tisa={"num_kernels": 1})
    registered = [
        "albert",
        "bert",
        "distilbert",
        "electra",
        "eurobert",
        "gte",
        "modernbert",
        "nomic_bert",
        "roberta",
        "xlm-roberta",
    ]
    # The RoPE architectures count where the installed transformers has them (GTE from 5.18, ...).
    supported = ", ".join(model_type for model_type in registered if ADAPTERS[model_type].available)
    with pytest.raises(ValueError, match=f"model type 'gpt2'; supported: {supported}. A new encoder"):
        AutoModel.from_config(config)
    with pytest.raises(ValueError, match="model type 'gpt2'"):
        tisa_hf.patch(AutoModel.from_config(GPT2Config(n_layer=1, n_head=2, n_embd=8, vocab_size=10)))


def test_the_docs_list_the_encoders_of_the_adapter_registry():
    using = (Path(__file__).resolve().parents[1] / "docs" / "using.md").read_text(encoding="utf-8")
    listed = " ".join(using.split("`tisa_hf.supported_model_types()`: ", 1)[1].split(". A new", 1)[0].split())
    # Every registered architecture, those the installed transformers lacks included (the docs say which release
    # each needs).
    assert listed == ", ".join(f"`{model_type}`" for model_type in sorted(ADAPTERS))


def test_eval_cache_is_rebuilt_after_an_optimizer_step():
    model = AutoModel.from_config(tiny_config("bert", tisa={"num_kernels": 2, "init": "random"}))
    with torch.no_grad():
        first = model.tisa(0, 7, torch.float32)
        assert model.tisa(0, 7, torch.float32) is first
    optimizer = torch.optim.SGD(model.tisa.parameters(), lr=0.1)
    model.tisa(0, 7, torch.float32).sum().backward()
    optimizer.step()
    with torch.no_grad():
        second = model.tisa(0, 7, torch.float32)
    assert second is not first and not torch.allclose(first, second)
