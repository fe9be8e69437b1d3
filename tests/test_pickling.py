"""TISA models go wherever pickle takes a model: `pickle`, `torch.save` of a whole model, PEFT wrappers and
sentence-transformers' worker processes, with the outputs they had."""

from __future__ import annotations

import io
import pickle

import pytest
import torch
from transformers import (
    AutoModel,
    AutoModelForMaskedLM,
    AutoModelForQuestionAnswering,
    AutoModelForSequenceClassification,
    AutoModelForTokenClassification,
    BertForMultipleChoice,
)

import tisa_hf
from tests.fixtures import tiny_config
from tisa_hf import model_configs, modeling
from tisa_hf.modeling import tisa_model_class

pytestmark = pytest.mark.core

INPUT_IDS = torch.tensor([[2, 7, 9, 11, 3, 0], [2, 5, 6, 3, 0, 0]])
ATTENTION_MASK = (INPUT_IDS != 0).long()


def _outputs(model: torch.nn.Module) -> torch.Tensor:
    with torch.no_grad():
        output = model(input_ids=INPUT_IDS, attention_mask=ATTENTION_MASK)
    return output[0]


def _tisa_model(auto_class: type, model_type: str, mode: str) -> torch.nn.Module:
    tisa = {"num_kernels": 2, "init": "random", "mode": mode}
    return auto_class.from_config(tiny_config(model_type, tisa=tisa)).eval()


def test_every_architecture_pickles_with_identical_outputs(model_type):
    model = _tisa_model(AutoModelForSequenceClassification, model_type, "add")
    expected = _outputs(model)
    again = pickle.loads(pickle.dumps(model))
    assert type(again) is type(model) and type(again.config) is type(model.config)
    assert tisa_hf.tisa_config_of(again) == tisa_hf.tisa_config_of(model)
    assert torch.equal(_outputs(again), expected)


@pytest.mark.parametrize(
    "auto_class", [AutoModel, AutoModelForMaskedLM, AutoModelForTokenClassification, AutoModelForQuestionAnswering]
)
@pytest.mark.parametrize("model_type", ["bert", "albert"])
def test_heads_in_replace_mode_pickle_with_identical_outputs(auto_class, model_type):
    model = _tisa_model(auto_class, model_type, "replace")
    expected = _outputs(model)
    assert torch.equal(_outputs(pickle.loads(pickle.dumps(model))), expected)


def test_a_patched_model_pickles():
    model = tisa_hf.patch(AutoModel.from_config(tiny_config("roberta")).eval(), {"num_kernels": 2, "init": "random"})
    expected = _outputs(model)
    assert torch.equal(_outputs(pickle.loads(pickle.dumps(model))), expected)


def test_torch_save_and_load_of_a_whole_model(tmp_path):
    model = _tisa_model(AutoModelForSequenceClassification, "electra", "replace")
    expected = _outputs(model)
    torch.save(model, tmp_path / "model.pt")
    again = torch.load(tmp_path / "model.pt", weights_only=False)
    assert torch.equal(_outputs(again), expected)


def test_a_peft_wrapped_model_pickles_with_its_trained_kernels():
    peft = pytest.importorskip("peft")
    config = peft.LoraConfig(r=4, target_modules=["query", "value"], modules_to_save=["tisa"])
    model = peft.get_peft_model(_tisa_model(AutoModel, "bert", "add"), config).eval()
    with torch.no_grad():
        model.base_model.model.tisa.modules_to_save["default"].amplitude.add_(0.5)  # differs from the frozen copy
    expected = _outputs(model)
    buffer = io.BytesIO()
    torch.save(model, buffer)
    buffer.seek(0)
    assert torch.equal(_outputs(torch.load(buffer, weights_only=False)), expected)
    assert torch.equal(_outputs(pickle.loads(pickle.dumps(model))), expected)


def test_a_class_not_built_yet_is_built_on_lookup_by_name():
    """What a process unpickling a model it has never built does: pickle looks the class up by name."""
    assert modeling.__getattr__("TisaBertForMultipleChoice") is tisa_model_class(BertForMultipleChoice)
    assert model_configs.__getattr__("TisaElectraConfig").model_type == "tisa_hf_electra"


def test_a_class_of_an_unsupported_or_unknown_architecture_is_a_clear_attribute_error():
    with pytest.raises(AttributeError, match=r"TisaGPT2Model cannot be built: TISA does not support model type "):
        modeling.__getattr__("TisaGPT2Model")
    with pytest.raises(AttributeError, match="transformers has no PreTrainedModel named 'NoSuchModel'"):
        modeling.__getattr__("TisaNoSuchModel")
    assert not hasattr(modeling, "__path__")  # module probes are plain misses


def test_multi_process_encode_equals_the_single_process_result(minilm):
    """sentence-transformers ships the model to spawned workers, fresh interpreters that import nothing by hand:
    unpickling the model imports tisa_hf, which registers TISA."""
    pytest.importorskip("sentence_transformers")
    from tisa_hf.common.sentence_models import to_tisa_sentence_transformer

    model = to_tisa_sentence_transformer(minilm, {"num_kernels": 2, "init": "random"}, max_seq_length=32, device="cpu")
    texts = ["a short text", "another one about cats and dogs", "the third sentence", "four"]
    # The workers get chunks of one text (4 texts over 2 processes): the reference embeds them one at a time too.
    expected = torch.stack([model.encode(text, convert_to_tensor=True) for text in texts])
    got = model.encode(texts, device=["cpu", "cpu"], convert_to_tensor=True)
    torch.testing.assert_close(got, expected, rtol=0, atol=1e-6)
