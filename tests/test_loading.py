"""Loading an encoder under a task head: the head is news (INFO), a missing or unused encoder weight is a warning."""

import logging

import pytest
import torch
from safetensors.torch import load_file, save_file
from transformers import AutoModel, AutoModelForMaskedLM, AutoModelForSequenceClassification

import tisa_hf
from tests.fixtures import tiny_config
from tisa_hf.common.head_loading import load_under_head

pytestmark = pytest.mark.core


def records(caplog, level):
    return [record.getMessage() for record in caplog.records if record.levelno == level]


# A masked-LM checkpoint of BERT or ALBERT has no pooler, which their classifiers use: worth a warning.
POOLERS = {
    "bert": ["bert.pooler.dense.bias", "bert.pooler.dense.weight"],
    "albert": ["albert.pooler.bias", "albert.pooler.weight"],
}


@pytest.mark.parametrize("saved_with", [AutoModel, AutoModelForMaskedLM], ids=["encoder", "masked-lm"])
def test_a_new_head_and_the_checkpoints_own_head_are_info(model_type, saved_with, tmp_path, caplog, capfd):
    saved_with.from_config(tiny_config(model_type)).save_pretrained(tmp_path)
    _, info = AutoModelForSequenceClassification.from_pretrained(tmp_path, output_loading_info=True)
    capfd.readouterr()
    caplog.clear()
    with caplog.at_level(logging.INFO):
        model = load_under_head(AutoModelForSequenceClassification, str(tmp_path), tisa={"num_kernels": 2})
    assert tisa_hf.tisa_config_of(model).num_kernels == 2
    name = type(model).__name__
    pooler = POOLERS.get(model_type, []) if saved_with is AutoModelForMaskedLM else []
    assert records(caplog, logging.WARNING) == (
        [
            f"{tmp_path} lacks these weights of {name}'s encoder, which start from random values: "
            f"{', '.join(pooler)}. Check that it is the checkpoint meant for this model."
        ]
        if pooler
        else []
    )
    head = sorted(set(info["missing_keys"]) - set(pooler))
    expected = [f"{name}: a new head, trained from scratch ({', '.join(head)})."]
    if info["unexpected_keys"]:
        unused = ", ".join(sorted(info["unexpected_keys"]))
        expected.append(f"{tmp_path}: head weights that {name} does not use ({unused}).")
    assert [message for message in records(caplog, logging.INFO) if message.startswith((name, str(tmp_path)))] == (
        expected
    )
    assert head and "LOAD REPORT" not in capfd.readouterr().err


def test_missing_and_unused_encoder_weights_are_warnings_naming_them(tmp_path, caplog):
    AutoModel.from_config(tiny_config("bert")).save_pretrained(tmp_path)
    weights = load_file(tmp_path / "model.safetensors")
    del weights["encoder.layer.1.attention.self.query.weight"]
    weights["encoder.layer.1.attention.self.extra"] = torch.zeros(3)
    save_file(weights, tmp_path / "model.safetensors", metadata={"format": "pt"})
    with caplog.at_level(logging.INFO):
        model = load_under_head(AutoModelForSequenceClassification, str(tmp_path))
    assert records(caplog, logging.WARNING) == [
        f"{tmp_path} lacks these weights of BertForSequenceClassification's encoder, which start from random values: "
        "bert.encoder.layer.1.attention.self.query.weight. Check that it is the checkpoint meant for this model.",
        f"{tmp_path} holds encoder weights that BertForSequenceClassification does not use: "
        "encoder.layer.1.attention.self.extra. Check that it is the checkpoint meant for this model.",
    ]
    assert model.base_model_prefix == "bert"
    assert not logging.getLogger("transformers.modeling_utils").filters  # the table's filter is gone again


HEADS = ("AutoModel", "AutoModelForMaskedLM", "AutoModelForSequenceClassification", "AutoModelForTokenClassification")


@pytest.mark.parametrize("head", HEADS)
def test_from_pretrained_without_a_path_loads_the_state_dict(model_type, head, monkeypatch):
    """`from_pretrained(None, config=..., state_dict=...)`, transformers' load of weights in memory, reads no file
    and keeps the state dict's kernels (offline: the Hub would be an error)."""
    import transformers

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    auto_class = getattr(transformers, head)
    model = auto_class.from_config(tiny_config(model_type, tisa={"num_kernels": 2, "init": "random"})).eval()
    loaded = type(model).from_pretrained(None, config=model.config, state_dict=model.state_dict()).eval()
    input_ids = torch.randint(3, 99, (2, 7))
    with torch.no_grad():
        assert torch.equal(loaded(input_ids=input_ids)[0], model(input_ids=input_ids)[0])
    without_kernels = {key: value for key, value in model.state_dict().items() if ".tisa." not in f".{key}"}
    with pytest.raises(ValueError, match="^the state_dict declares TISA .* but its weights lack .*tisa.amplitude"):
        type(model).from_pretrained(None, config=model.config, state_dict=without_kernels)
