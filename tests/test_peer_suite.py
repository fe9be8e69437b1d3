"""transformers' own common model tests (`ModelTesterMixin`, `ConfigTester`, from the sdist of the installed
transformers: `tests/peer_common.py`) on the TISA classes of every supported architecture, in `add` and `replace`
mode, over this project's model testers (`tests/peer_testers.py`). `TISA_HF_PEER_STOCK=1` runs the stock classes
through the same testers too, the reference for which failures belong to the test setup."""

from __future__ import annotations

import os
import unittest

import pytest

from tests.peer_common import import_common_tests
from tests.peer_testers import ARCHITECTURES, HEAD_CHECKS, VARIANTS, Architecture, EncoderModelTester
from tisa_hf.adapters import ADAPTERS

try:
    test_modeling_common, test_configuration_common = import_common_tests()
except FileNotFoundError as missing:
    pytest.skip(str(missing), allow_module_level=True)
except ModuleNotFoundError as missing:
    pytest.skip(
        f"transformers' common model tests need {missing.name}: pip install -e '.[test]'", allow_module_level=True
    )

# The common tests that cannot apply to a bias-only change of the attention, each with the reason: the first list.
SKIPPED = {
    f"test_eager_matches_sdpa_inference_{index:02d}_{dtype}_pad_{side}{mask}{kernels}": (
        "eager against sdpa in half precision on the CPU: minutes of the suite; every precision is compared on a GPU "
        "(tests/test_cuda.py) and float32 here"
    )
    for index, (dtype, side, mask, kernels) in enumerate(
        (dtype, side, mask, kernels)
        for dtype in ("fp16", "fp32", "bf16")
        for side in ("left", "right")
        for mask in ("", "_no_attn_mask")
        for kernels in ("_sdpa_kernels", "")
    )
    if dtype != "fp32"
}

# The common tests that cannot apply to a RoPE encoder in `replace` mode, which takes the rotation out of the query and
# key: the second list.
ROTARY_REPLACE_SKIPPED = {
    f"test_model_rope_scaling_from_config_{index}_{scaling}": (
        "replace mode takes the rotation out of the query and key, so the rotary scaling the test sets cannot change "
        "the output it expects to change"
    )
    for index, scaling in enumerate(("linear", "dynamic"))
}

# The common test that cannot apply to TISA's kernels drawn at random by these testers (`init="random"`): the third
# list, for the RoPE encoders, the classes transformers runs it on.
ROTARY_SKIPPED = {
    "test_can_init_all_missing_weights": (
        "TISA draws its random kernels after transformers' seeded initialisation, so a load and a build draw them at "
        "other points of the random stream; every other weight starts as the stock class draws it "
        "(tests/test_rope_contract.py::test_weights_a_checkpoint_lacks_start_as_the_stock_class_draws_them)"
    )
}


class EncoderPeerTests(test_modeling_common.ModelTesterMixin):
    """The common suite plus the per-model tests of an architecture's heads, for one architecture and variant."""

    architecture: Architecture
    variant: str

    def setUp(self):
        self.model_tester = EncoderModelTester(self, self.architecture, self.variant)
        config_class = type(self.model_tester.get_config())
        size = {self.architecture.hidden_size_name: self.architecture.config_tester_size}
        self.config_tester = test_configuration_common.ConfigTester(self, config_class=config_class, **size)

    def test_config(self):
        self.config_tester.run_common_tests()

    def check(self, head: str) -> None:
        """The tester's `create_and_check_<head>` on fresh inputs, as transformers' per-model tests call it."""
        getattr(self.model_tester, f"create_and_check_{head}")(*self.model_tester.prepare_config_and_inputs())


def head_test(check: str):
    """The per-model test `test_<check>` of one head."""

    def test(self):
        self.check(check)

    test.__name__ = f"test_{check}"
    return test


class DecoderPeerTests(EncoderPeerTests):
    """The per-model tests of an architecture with a causal LM head: as a decoder, with cross-attention and a cache."""

    def test_model_as_decoder(self):
        self.model_tester.create_and_check_model_as_decoder(*self.model_tester.prepare_config_and_inputs_for_decoder())

    def test_model_as_decoder_with_default_input_mask(self):
        config, inputs, *rest = self.model_tester.prepare_config_and_inputs_for_decoder()
        inputs.pop("attention_mask")
        self.model_tester.create_and_check_model_as_decoder(config, inputs, *rest)

    def test_for_causal_lm(self):
        self.model_tester.create_and_check_for_causal_lm(*self.model_tester.prepare_config_and_inputs_for_decoder())

    def test_for_causal_lm_decoder(self):
        decoder = self.model_tester.prepare_config_and_inputs_for_decoder()
        self.model_tester.create_and_check_for_causal_lm_as_decoder(*decoder)

    def test_decoder_model_past_with_large_inputs(self):
        decoder = self.model_tester.prepare_config_and_inputs_for_decoder()
        self.model_tester.create_and_check_decoder_model_past_large_inputs(*decoder)


def peer_test_class(architecture: Architecture, variant: str) -> type:
    """The unittest class of one architecture and variant: a per-model test for each of its heads, the skip list
    applied. An architecture the installed transformers lacks gets one test, skipped with its adapter's reason."""
    title = f"{architecture.prefix}{variant.capitalize()}PeerTest"
    adapter = ADAPTERS[architecture.model_type]
    if not adapter.available:
        absent = type(title, (unittest.TestCase,), {"test_common_suite": lambda self: None})
        return unittest.skip(adapter.unavailable_reason())(absent)
    tester = EncoderModelTester(None, architecture, variant)
    bases = (DecoderPeerTests if architecture.causal_lm else EncoderPeerTests,)
    namespace = {
        "architecture": architecture,
        "variant": variant,
        "all_model_classes": tuple(tester.model_class(head) for head in architecture.common_heads()),
        "pipeline_model_mapping": {},
        "pytestmark": [pytest.mark.slow] if architecture.slow else [],
    }
    for head in architecture.heads:
        namespace[f"test_{HEAD_CHECKS[head]}"] = head_test(HEAD_CHECKS[head])
    skipped = {**SKIPPED}
    if architecture.rotary and variant != "stock":
        skipped |= ROTARY_SKIPPED
    if architecture.rotary and variant == "replace":
        skipped |= ROTARY_REPLACE_SKIPPED
    for name, reason in skipped.items():
        namespace[name] = unittest.skip(reason)(lambda self: None)
    mixins = (GenerationTester,) if architecture.causal_lm else ()
    return type(title, (*bases, *mixins, unittest.TestCase), namespace)


GenerationTester = test_modeling_common.GenerationTesterMixin
RUN_VARIANTS = VARIANTS if os.environ.get("TISA_HF_PEER_STOCK") == "1" else VARIANTS[1:]
for _architecture in ARCHITECTURES:
    for _variant in RUN_VARIANTS:
        _class = peer_test_class(_architecture, _variant)
        globals()[_class.__name__] = _class
del _architecture, _variant, _class
