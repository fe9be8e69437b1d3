"""The seam with transformers: checkpoint identity, strict loading, quiet conversion, no effect on other models."""

from __future__ import annotations

import copy
import json
import logging
import re
import subprocess
import sys
import textwrap

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModel, AutoModelForSequenceClassification, BertForSequenceClassification, BertModel

import tisa_hf
from tests.fixtures import TINY_SIZES, tiny_config
from tests.reference import reference_forward
from tisa_hf.attention import ATTENTION_FUNCTIONS

pytestmark = pytest.mark.core


@pytest.fixture
def plain_dir(tmp_path):
    path = tmp_path / "plain"
    AutoModelForSequenceClassification.from_config(tiny_config("bert", num_labels=2)).save_pretrained(path)
    return path


@pytest.fixture
def tisa_dir(tmp_path, plain_dir):
    model = AutoModelForSequenceClassification.from_pretrained(
        plain_dir, tisa=tisa_hf.TisaConfig(num_kernels=2, mode="replace", init="random")
    )
    path = tmp_path / "tisa"
    model.save_pretrained(path)
    return path


def logits(model, input_ids):
    with torch.no_grad():
        return model.eval()(input_ids=input_ids).logits


def drop_weights(path, names):
    weights = load_file(path / "model.safetensors")
    save_file({key: value for key, value in weights.items() if key not in names}, path / "model.safetensors")


def test_checkpoint_declares_its_tisa_model_type(tisa_dir):
    saved = json.loads((tisa_dir / "config.json").read_text())
    assert saved["model_type"] == "tisa_hf_bert"
    assert saved["architectures"] == ["TisaBertForSequenceClassification"]
    assert saved["tisa"]["num_kernels"] == 2
    assert saved["attn_implementation"] == "tisa_sdpa"  # what makes plain classes refuse it without tisa_hf
    assert "auto_map" not in saved  # no remote code involved


def test_loading_without_tisa_hf_fails_naming_the_package(tisa_dir):
    script = textwrap.dedent(
        f"""
        import sys
        from transformers import AutoModelForSequenceClassification
        try:
            AutoModelForSequenceClassification.from_pretrained({str(tisa_dir)!r})
        except ValueError as error:
            print(error)
            sys.exit(3)
        """
    )
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert result.returncode == 3, result.stderr
    assert "model type `tisa_hf_bert`" in result.stdout and "tisa_hf" in result.stdout


PLAIN_CLASS_SCRIPT = """
import sys
from transformers import BertForSequenceClassification
try:
    BertForSequenceClassification.from_pretrained(PATH)
except ValueError as error:
    print("refused:", "tisa_hf" in sys.modules, str(error).split(". ")[0])
model = BertForSequenceClassification.from_pretrained(PATH, attn_implementation="sdpa")
print("asked for sdpa:", type(model).__name__, model.config._attn_implementation)
"""


def test_plain_class_without_tisa_hf_refuses_the_checkpoint_unless_told_the_attention(tisa_dir):
    """Without tisa_hf, transformers does not know the attention function config.json names, and says so before
    reading any weights; naming a backend explicitly overrides it (the README says so)."""
    script = PLAIN_CLASS_SCRIPT.replace("PATH", repr(str(tisa_dir)))
    result = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.splitlines() == [
        'refused: False Specified `attn_implementation="tisa_sdpa"` is not supported',
        "asked for sdpa: BertForSequenceClassification sdpa",
    ]


def test_plain_class_with_tisa_hf_and_checkpoints_without_the_attention_name_load_as_saved(tisa_dir, tmp_path):
    """With tisa_hf, a plain class hands a TISA checkpoint to its TISA class; checkpoints written before config.json
    named TISA's attention load as they did."""
    model = AutoModelForSequenceClassification.from_pretrained(tisa_dir)
    unnamed = tmp_path / "unnamed"
    model.save_pretrained(unnamed)
    config = json.loads((unnamed / "config.json").read_text())
    del config["attn_implementation"]
    (unnamed / "config.json").write_text(json.dumps(config))
    input_ids = torch.randint(1, 99, (2, 9))
    for loader, path in ((BertForSequenceClassification, tisa_dir), (AutoModelForSequenceClassification, unnamed)):
        loaded = loader.from_pretrained(path)
        assert type(loaded).__name__ == "TisaBertForSequenceClassification"
        assert loaded.config._attn_implementation == "sdpa"
        assert loaded.bert.encoder.layer[0].attention.self.config._attn_implementation == "tisa_sdpa"
        torch.testing.assert_close(logits(loaded, input_ids), logits(model, input_ids), rtol=0, atol=0)


def test_auto_classes_reload_with_identical_logits(tisa_dir):
    first = AutoModelForSequenceClassification.from_pretrained(tisa_dir)
    second = AutoModelForSequenceClassification.from_pretrained(tisa_dir)
    assert type(first).__name__ == "TisaBertForSequenceClassification"
    input_ids = torch.randint(1, 99, (2, 9))
    torch.testing.assert_close(logits(first, input_ids), logits(second, input_ids), rtol=0, atol=0)
    base = AutoModel.from_pretrained(tisa_dir)  # the encoder alone, from the same checkpoint
    torch.testing.assert_close(base.tisa.amplitude, first.base_model.tisa.amplitude, rtol=0, atol=0)


def test_checkpoint_of_tisa_hf_0_1_still_loads_with_its_kernels(tisa_dir, tmp_path):
    """0.1 saved the base model type with a `tisa` dict in config.json."""
    model = AutoModelForSequenceClassification.from_pretrained(tisa_dir)
    legacy = tmp_path / "legacy"
    model.save_pretrained(legacy)
    config = json.loads((legacy / "config.json").read_text())
    config.update(model_type="bert", architectures=["BertForSequenceClassification"])
    del config["attn_implementation"]
    (legacy / "config.json").write_text(json.dumps(config))
    input_ids = torch.randint(1, 99, (2, 9))
    for loader in (AutoModelForSequenceClassification, BertForSequenceClassification):
        loaded = loader.from_pretrained(legacy)
        assert tisa_hf.tisa_config_of(loaded) == tisa_hf.TisaConfig(num_kernels=2, mode="replace", init="random")
        torch.testing.assert_close(logits(loaded, input_ids), logits(model, input_ids), rtol=0, atol=0)


def test_output_loading_info_returns_the_model_and_what_transformers_reports(plain_dir, tisa_dir, tmp_path):
    """transformers' (model, info) pair, for a plain model (untouched by tisa_hf), a TISA one and a 0.1 one."""
    encoder = tmp_path / "encoder"
    AutoModel.from_pretrained(plain_dir).save_pretrained(encoder)
    model, info = BertForSequenceClassification.from_pretrained(encoder, output_loading_info=True)
    assert type(model) is BertForSequenceClassification
    assert sorted(info["missing_keys"]) == ["classifier.bias", "classifier.weight"] and not info["unexpected_keys"]
    tisa = tisa_hf.TisaConfig(num_kernels=2, mode="replace", init="random")
    model, info = AutoModelForSequenceClassification.from_pretrained(encoder, tisa=tisa, output_loading_info=True)
    assert tisa_hf.tisa_config_of(model) == tisa
    assert sorted(info["missing_keys"]) == ["classifier.bias", "classifier.weight"]
    legacy = tmp_path / "legacy"
    AutoModelForSequenceClassification.from_pretrained(tisa_dir).save_pretrained(legacy)
    config = json.loads((legacy / "config.json").read_text())
    config.update(model_type="bert", architectures=["BertForSequenceClassification"])
    del config["attn_implementation"]
    (legacy / "config.json").write_text(json.dumps(config))
    model, info = BertForSequenceClassification.from_pretrained(legacy, output_loading_info=True)
    assert tisa_hf.tisa_config_of(model) == tisa and not info["missing_keys"] and not info["unexpected_keys"]


@pytest.mark.parametrize(
    "dropped", [("bert.tisa.amplitude", "bert.tisa.sharpness", "bert.tisa.center"), ("bert.tisa.center",)]
)
def test_missing_kernels_are_an_error_naming_them(tisa_dir, dropped):
    drop_weights(tisa_dir, dropped)
    with pytest.raises(
        ValueError, match="weights lack " + ", ".join(sorted(dropped)) + r"\. Pass tisa_reinitialize=True"
    ):
        AutoModelForSequenceClassification.from_pretrained(tisa_dir)


def test_missing_kernels_are_started_afresh_on_purpose(tisa_dir):
    drop_weights(tisa_dir, ("bert.tisa.center",))
    model = AutoModelForSequenceClassification.from_pretrained(tisa_dir, tisa_reinitialize=True)
    assert torch.isfinite(model.base_model.tisa.center).all()
    assert model.base_model.tisa.center.abs().max() <= 64  # random centres lie in the fit window


def test_a_checkpoint_without_any_weight_of_the_model_reports_the_kernels_missing_with_the_rest(tisa_dir):
    """Not a TISA checkpoint that lost its kernels: nothing of the model is there (transformers' own common test of
    missing weights saves such a file). transformers reports every weight missing, the kernels with them, and the
    kernels start by their `init` as every other weight starts by its own."""
    save_file({"tensor": torch.tensor([1, 2])}, tisa_dir / "model.safetensors", metadata={"format": "pt"})
    model, info = AutoModelForSequenceClassification.from_pretrained(tisa_dir, output_loading_info=True)
    assert set(model.state_dict()) <= set(info["missing_keys"])
    assert {"bert.tisa.amplitude", "bert.tisa.sharpness", "bert.tisa.center"} <= set(info["missing_keys"])
    amplitude = model.base_model.tisa.amplitude
    assert torch.isfinite(amplitude).all() and amplitude.abs().sum() > 0  # init="random"


def test_non_finite_kernels_are_refused_at_load(tisa_dir):
    weights = load_file(tisa_dir / "model.safetensors")
    weights["bert.tisa.amplitude"][0, 1, 0] = float("nan")
    save_file(weights, tisa_dir / "model.safetensors")
    with pytest.raises(ValueError, match=r"kernels tisa\.amplitude loaded from .* hold NaN or inf"):
        AutoModelForSequenceClassification.from_pretrained(tisa_dir)


def test_non_finite_kernels_are_refused_at_patch_time():
    model = AutoModel.from_config(tiny_config("bert"))
    with torch.no_grad():
        model.embeddings.position_embeddings.weight[3, 0] = float("inf")
    with pytest.raises(ValueError, match="kernels .* fitted to the model's positional profiles .* hold NaN or inf"):
        tisa_hf.patch(model, tisa_hf.TisaConfig(num_kernels=2, fit_window=8))


def test_tisa_contradicting_a_tisa_checkpoint_is_refused_before_loading(tisa_dir):
    with pytest.raises(ValueError, match="was saved with TISA .*num_kernels=2.* tisa= asks for .*num_kernels=3"):
        AutoModelForSequenceClassification.from_pretrained(tisa_dir, tisa={"num_kernels": 3, "mode": "replace"})


def test_converting_a_plain_checkpoint_is_quiet(plain_dir, caplog, capfd):
    with caplog.at_level(logging.DEBUG):
        AutoModelForSequenceClassification.from_pretrained(
            plain_dir, tisa=tisa_hf.TisaConfig(num_kernels=2, fit_window=8)
        )
    warnings = [record for record in caplog.records if record.levelno >= logging.WARNING]
    assert warnings == []
    tisa_lines = [record.getMessage() for record in caplog.records if record.name.startswith("tisa_hf")]
    # a line when the fit starts and one when it ends; a fit still running after 10 s (a loaded machine) adds
    # progress lines between them
    assert tisa_lines[0] == "TISA kernels: fitting S = 2 to the model's positional profiles"
    assert re.fullmatch(
        r"TISA kernels fitted to the positional profiles in \d+\.\d s: mean fit R² \d\.\d{3}", tisa_lines[-1]
    )
    assert all(line.startswith("kernel fit (S = 2, 12 profiles): ") for line in tisa_lines[1:-1])
    captured = capfd.readouterr()
    assert "MISSING" not in captured.err + captured.out + caplog.text


def test_patch_leaves_a_shared_config_untouched():
    config = tiny_config("bert")
    first, second = AutoModel.from_config(config).eval(), AutoModel.from_config(config).eval()
    input_ids = torch.randint(1, 99, (2, 7))
    with torch.no_grad():
        before = second(input_ids=input_ids).last_hidden_state
    tisa_hf.patch(first, tisa_hf.TisaConfig(num_kernels=2, init="random"))
    assert "tisa" not in config.__dict__ and config.model_type == "bert" and config._attn_implementation == "sdpa"
    assert first.config is not config and first.config.model_type == "tisa_hf_bert"
    third = AutoModel.from_config(config).eval()
    assert type(third) is BertModel and not hasattr(third, "tisa")
    with torch.no_grad():
        torch.testing.assert_close(second(input_ids=input_ids).last_hidden_state, before, rtol=0, atol=0)


def test_attention_implementation_stays_tisa_when_switched():
    model = AutoModel.from_config(tiny_config("bert", tisa={"num_kernels": 2, "init": "random"})).eval()
    input_ids = torch.randint(1, 99, (2, 7))
    with torch.no_grad():
        sdpa = model(input_ids=input_ids).last_hidden_state
        model.set_attn_implementation("eager")
        site = model.encoder.layer[0].attention.self
        assert (model.config._attn_implementation, site.config._attn_implementation) == ("eager", "tisa_eager")
        eager = model(input_ids=input_ids).last_hidden_state
        model.config._attn_implementation = "sdpa"  # even after a direct assignment the sites run TISA's function
        assert (model.config._attn_implementation, site.config._attn_implementation) == ("sdpa", "tisa_sdpa")
        with tisa_hf.tisa_disabled(model):
            plain = model(input_ids=input_ids).last_hidden_state
    torch.testing.assert_close(eager, sdpa, atol=1e-5, rtol=1e-4)
    assert (plain - sdpa).abs().max() > 1e-4


STOCK_MODEL_SCRIPT = """
import torch
from transformers import AttentionInterface, BertConfig, BertForSequenceClassification
from transformers.masking_utils import AttentionMaskInterface

def stock_outputs():
    torch.manual_seed(0)
    results = []
    for implementation in ("sdpa", "eager"):
        config = BertConfig(**SIZES, attn_implementation=implementation)
        model = BertForSequenceClassification(config).eval()
        input_ids = torch.randint(1, 99, (2, 11)); mask = torch.ones_like(input_ids); mask[1, 7:] = 0
        with torch.no_grad():
            results.append(model(input_ids=input_ids, attention_mask=mask).logits)
        model.train()
        model(input_ids=input_ids, attention_mask=mask).logits.square().sum().backward()
        results.append(model.bert.encoder.layer[0].attention.self.query.weight.grad)
    return results

functions = dict(AttentionInterface._global_mapping), dict(AttentionMaskInterface._global_mapping)
before = stock_outputs()
import tisa_hf
config = BertConfig(**SIZES)
patched = tisa_hf.patch(BertForSequenceClassification(config), tisa_hf.TisaConfig(num_kernels=2, init="random"))
patched(input_ids=torch.randint(1, 99, (2, 11))).logits.sum().backward()
after = stock_outputs()
assert all(torch.equal(a, b) for a, b in zip(before, after, strict=True)), "stock outputs changed"
for registry, old in zip((AttentionInterface._global_mapping, AttentionMaskInterface._global_mapping), functions):
    assert all(registry[name] is function for name, function in old.items()), "a stock entry was replaced"
    assert set(registry) - set(old) == {"tisa_eager", "tisa_sdpa", "tisa_flex_attention"}, set(registry) - set(old)
print("bitwise")
""".replace("SIZES", repr({**TINY_SIZES, "num_hidden_layers": 2}))  # stock dropout: the backward runs in training


def test_stock_models_compute_bitwise_the_same_after_import_and_patching():
    result = subprocess.run([sys.executable, "-c", STOCK_MODEL_SCRIPT], capture_output=True, text=True, check=False)
    assert result.returncode == 0, result.stderr[-2000:]
    assert result.stdout.strip() == "bitwise"


def test_every_backend_has_a_tisa_function_and_mask():
    assert set(ATTENTION_FUNCTIONS) == {"tisa_eager", "tisa_sdpa", "tisa_flex_attention"}


def test_a_replaced_kernel_module_is_used(model_type):
    """The attention functions look the kernels up on the encoder at each call, so a module put in their place
    (as PEFT's `modules_to_save` does) is the one that runs."""
    config = tiny_config(model_type, tisa={"num_kernels": 2, "init": "random"})
    model = AutoModel.from_config(config).eval()
    replacement = copy.deepcopy(model.tisa)
    with torch.no_grad():
        replacement.amplitude.mul_(3)
    model.tisa = replacement
    low = 3 if model_type in ("roberta", "xlm-roberta") else 1
    input_ids = torch.randint(low, 99, (2, 7))
    with torch.no_grad():
        got = model(input_ids=input_ids).last_hidden_state
    expected = reference_forward(model_type, model, input_ids, torch.ones_like(input_ids, dtype=torch.bool))
    torch.testing.assert_close(got, expected, atol=1e-5, rtol=1e-4)


def test_patched_model_returns_hidden_states_and_attentions():
    model = AutoModel.from_config(tiny_config("bert"), attn_implementation="eager").eval()
    tisa_hf.patch(model, tisa_hf.TisaConfig(num_kernels=2, init="random"))
    with torch.no_grad():
        outputs = model(input_ids=torch.randint(1, 99, (1, 6)), output_hidden_states=True, output_attentions=True)
    assert len(outputs.hidden_states) == 4 and len(outputs.attentions) == 3


def test_plain_class_with_tisa_hf_loads_a_tisa_folder_once_and_quietly(tisa_dir, capfd):
    """Straight to the TISA class: no model-type warning, no report of the kernels as unexpected weights."""
    capfd.readouterr()
    loaded = BertForSequenceClassification.from_pretrained(tisa_dir)
    printed = capfd.readouterr()
    assert type(loaded).__name__ == "TisaBertForSequenceClassification"
    for noise in ("model of type", "UNEXPECTED", "tisa.amplitude"):
        assert noise not in printed.err + printed.out
