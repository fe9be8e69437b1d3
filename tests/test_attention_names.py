"""A TISA model's config names its attention backend as transformers does (`eager`, `sdpa`, `flex_attention`),
while its attention sites run TISA's function for that name; switching the backend works both ways."""

from __future__ import annotations

import copy
import pickle

import pytest
import torch
from transformers import AutoModel, BertModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.modeling_utils import ALL_ATTENTION_FUNCTIONS

import tisa_hf
from tests.fixtures import tiny_config
from tests.reference import reference_forward
from tests.test_attention import make_inputs

pytestmark = pytest.mark.core


def tisa_model(model_type="bert", attn="sdpa"):
    torch.manual_seed(0)
    config = tiny_config(model_type, tisa={"num_kernels": 3, "init": "random"})
    return AutoModel.from_config(config, attn_implementation=attn).eval()


def assert_matches_reference(model, model_type="bert"):
    input_ids, mask = make_inputs(model.config)
    with torch.no_grad():
        got = model(input_ids=input_ids, attention_mask=mask).last_hidden_state
    expected = reference_forward(model_type, model, input_ids, mask.bool())
    keep = mask.bool()
    torch.testing.assert_close(got[keep], expected[keep], atol=1e-5, rtol=1e-4)


@pytest.mark.parametrize("attn", ["eager", "sdpa", "flex_attention"])
def test_config_reads_transformers_name_and_tisa_runs(model_type, attn):
    model = tisa_model(model_type, attn)
    assert model.config._attn_implementation == attn
    if attn != "flex_attention":  # flex attention's reference is in test_attention.py; here its name only
        assert_matches_reference(model, model_type)


def test_set_attn_implementation_both_ways_keeps_tisa():
    model = tisa_model(attn="sdpa")
    for attn in ("eager", "sdpa", "eager"):
        model.set_attn_implementation(attn)
        assert model.config._attn_implementation == attn
        assert model.encoder.layer[0].attention.self.config._attn_implementation == f"tisa_{attn}"
        assert_matches_reference(model)


def test_tisa_names_given_by_hand_read_as_transformers_names():
    model = tisa_model(attn="tisa_eager")
    assert model.config._attn_implementation == "eager"
    model.config._attn_implementation = "tisa_sdpa"
    assert model.config._attn_implementation == "sdpa"
    assert_matches_reference(model)


def test_other_models_keep_transformers_functions():
    """No global side effect: `sdpa` is still transformers' function, and a plain model's modules read it."""
    assert ALL_ATTENTION_FUNCTIONS["sdpa"] is sdpa_attention_forward
    plain = BertModel(tiny_config("bert"))
    assert plain.encoder.layer[0].attention.self.config is plain.config
    assert plain.config._attn_implementation == "sdpa"


def test_copies_and_pickles_keep_their_own_config_and_tisa():
    model = tisa_model(attn="sdpa")
    for copied in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        site = copied.encoder.layer[0].attention.self
        assert site.config.config is copied.config and copied.config is not model.config
        copied.set_attn_implementation("eager")
        assert model.config._attn_implementation == "sdpa"
        assert_matches_reference(copied)
    # the sites really run TISA: without the bias the output moves off the reference
    with tisa_hf.tisa_disabled(model), pytest.raises(AssertionError):
        assert_matches_reference(model)
