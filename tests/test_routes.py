"""The route decision that `tisa_sdpa`, `tisa_flex_attention` and `tisa-hf env` share, and the flex route that
reads the bias from its (H, 2n-1) offset table."""

from __future__ import annotations

import pytest
import torch
from reference import reference_forward
from test_attention import make_inputs
from transformers import AutoModel

import tisa_hf
import tisa_hf.attention as attention
from tests.fixtures import RecordingRoute, requires_extra, tiny_config
from tisa_hf.errors import UsageError
from tisa_hf.kernels import TisaPositionBias
from tisa_hf.performance import env as routes

pytestmark = pytest.mark.core

CPU = torch.device("cpu")
SHAPE = routes.Shape(layers=3, heads=4, head_dim=8)  # tiny_config's encoder


def padded(config, length: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(1, config.vocab_size, (2, length), generator=generator)
    mask = torch.ones(2, length, dtype=torch.long)
    mask[1, length // 2 :] = 0
    return input_ids, mask


@pytest.mark.parametrize("phase", routes.PHASES, ids=lambda phase: phase.name)
@pytest.mark.parametrize("length", [12, 30])
def test_report_names_the_route_a_model_takes(monkeypatch, phase, length):
    monkeypatch.setattr(TisaPositionBias, "cache_limit_bytes", 3 * 4 * 20 * 20 * 4)  # blockwise beyond 20 tokens
    recorder = RecordingRoute().install(monkeypatch)
    config = tiny_config("bert", attention_probs_dropout_prob=phase.dropout, tisa={"num_kernels": 2, "init": "random"})
    model = AutoModel.from_config(config, attn_implementation="sdpa").train(phase.training)
    input_ids, mask = padded(config, length)
    with torch.set_grad_enabled(phase.training):
        model(input_ids=input_ids, attention_mask=mask)
    taken = set(recorder.taken)
    reported = routes.route("sdpa", phase, length, SHAPE, CPU, None)
    assert len(taken) == 1
    # Random kernels are nonzero at every offset, as the report's stand-in kernels are.
    assert reported.chosen.startswith(recorder.taken[0].name + " (")
    expected = {
        "train": attention.STORED_BIAS,
        "train, dropout 0": attention.TRAINABLE_BIAS,
        "inference": attention.STORED_BIAS if length <= 20 else attention.BLOCKWISE,
    }
    assert recorder.taken[0] is expected[phase.name]


def test_env_command_prints_the_machine_and_the_routes(capsys):
    assert routes.main(["--device", "cpu", "--lengths", "128", "8192"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].startswith(f"torch {torch.__version__} (CUDA ") and lines[0].endswith("device cpu")
    assert f"torch threads: {torch.get_num_threads()} intra-op" in lines[2]
    assert (
        lines[lines.index("  sdpa, float32, train, dropout 0:") + 1]
        == "    128, 8192: trainable-bias SDPA (flash forward)"
    )
    assert (
        "  sm_75 (Turing: RTX 2080, T4): sdpa: SDPA + stored bias on the memory-efficient kernel, fp32 or fp16 (no "
        "bf16); flex attention: not available; fused TISA kernel: fp32 or fp16 (no bf16), heads up to 128, 1 "
        "pipeline stage, in the fused policy" in lines
    )
    assert (
        "  (the standard policy, the default; the fused policy: TisaConfig(sdpa_policy='fused') for one model, "
        "TISA_HF_FUSED_ATTENTION=1 for every model that names none)" in lines
    )
    inference = lines.index("  sdpa, float32, inference:")
    assert lines[inference + 1 : inference + 8] == [
        "    128: SDPA + stored bias (flash)",
        "      not sdpa: the layer has TISA kernels",
        "      not banded SDPA: every layer's bias at 128 tokens fits the kernels' cache, which holds it",
        "      not blockwise SDPA: every layer's bias at 128 tokens fits the kernels' cache, which holds it",
        "      not trainable-bias SDPA: no gradient reaches the kernels: the bias is a constant mask PyTorch's own "
        "kernels take",
        "    8192: blockwise SDPA (flash)",
        "      not sdpa: the layer has TISA kernels",
    ]
    assert "      not banded SDPA: the layer's f(k) is not 0 outside a band of at most 0.25n offsets" in lines
    assert (
        lines[lines.index("  flex_attention, float32, inference:") + 1]
        == "    128, 8192: flex, offset table in score_mod"
    )
    train = lines.index("  flex_attention, float32, train, dropout 0:")
    assert lines[train + 1] == "    128, 8192: refused: flex attention cannot train TISA kernels on CPU"


@pytest.mark.parametrize(
    ("phase", "length", "route", "reason"),
    [
        (routes.PHASES[0], 12, attention.TRAINABLE_BIAS, "attention dropout 0.1, which the hand-written backward "),
        (routes.PHASES[1], 12, attention.BLOCKWISE, "a gradient reaches the kernels (it is an inference route)"),
        (routes.PHASES[2], 12, attention.BLOCKWISE, "every layer's bias at 12 tokens fits the kernels' cache"),
        (routes.PHASES[2], 30, attention.BANDED, "the layer's f(k) is not 0 outside a band of at most 0.25n"),
    ],
)
def test_the_report_says_why_each_route_passed_over_did_not_apply(monkeypatch, phase, length, route, reason):
    """The reasons are the routes' own refusals: one condition changed (dropout, grad mode, a length past the cache)
    changes the reason a route gives, and the route that gave none is the one chosen."""
    monkeypatch.setattr(TisaPositionBias, "cache_limit_bytes", 3 * 4 * 20 * 20 * 4)  # blockwise beyond 20 tokens
    reported = routes.route("sdpa", phase, length, SHAPE, CPU, None)
    reasons = dict(line.split(": ", 1) for line in reported.passed_over)
    assert reasons[route.name].startswith(reason)
    assert not reported.chosen.startswith(tuple(reasons))


def test_flex_route_reads_offset_table_and_never_builds_the_full_bias(monkeypatch):
    """With padding, against the reference written from the equations (test_attention's shapes: one compilation)."""
    config = tiny_config("bert", tisa={"num_kernels": 3, "mode": "replace", "init": "random"})
    model = AutoModel.from_config(config, attn_implementation="flex_attention").eval()

    def no_full_bias(*args):
        raise AssertionError("the flex route built the (H, n, n) bias")

    monkeypatch.setattr(TisaPositionBias, "forward", no_full_bias)
    input_ids, mask = make_inputs(config)
    with torch.no_grad():
        got = model(input_ids=input_ids, attention_mask=mask).last_hidden_state
    monkeypatch.undo()
    expected = reference_forward("bert", model, input_ids, mask.bool(), "replace")
    keep = mask.bool()
    torch.testing.assert_close(got[keep], expected[keep], atol=1e-5, rtol=1e-4)


def test_flex_training_on_cpu_is_refused_before_any_work():
    config = tiny_config("bert", tisa={"num_kernels": 2, "init": "random"})
    model = AutoModel.from_config(config, attn_implementation="flex_attention").train()
    input_ids, mask = padded(config, 8)
    with pytest.raises(UsageError) as error:
        model(input_ids=input_ids, attention_mask=mask)
    assert str(error.value) == (
        "flex attention cannot train TISA kernels on CPU: PyTorch has no flex attention backward there. Use "
        "attn_implementation='sdpa' to train on CPU (flex attention runs inference on CPU and trains on CUDA)."
    )
    model.tisa.requires_grad_(False)  # frozen kernels: nothing of TISA's needs the backward
    assert attention.flex.flex_refusal(model.tisa, torch.zeros(1, 4, 8, 8), 0.0) is None


def test_flex_with_attention_dropout_is_refused_with_the_fix():
    config = tiny_config("bert", attention_probs_dropout_prob=0.1, tisa={"num_kernels": 2, "init": "random"})
    model = AutoModel.from_config(config, attn_implementation="flex_attention").train()
    input_ids, mask = padded(config, 8)
    refused = pytest.raises(UsageError, match=r"^flex attention has no attention dropout, and this model's is 0\.1")
    with refused, torch.no_grad():
        model(input_ids=input_ids, attention_mask=mask)


def test_the_reported_backend_is_asked_about_a_mask_laid_out_like_the_bias(monkeypatch):
    """Off the CPU, PyTorch's fused SDPA kernels refuse a mask whose last dimension is not of stride 1 (the math
    backend then runs), so the stand-in mask `tisa-hf env` asks about must keep the stored bias's stride 1 there,
    while being no larger than one row."""
    seen = []

    def recording_choice(query, key, value, mask, dropout, is_causal):
        seen.append(mask)
        return int(torch.nn.attention.SDPBackend.FLASH_ATTENTION)

    monkeypatch.setattr(torch, "_fused_sdp_choice", recording_choice)
    for phase in routes.PHASES:
        routes.route("sdpa", phase, 64, SHAPE, CPU, None)
    assert seen and all(mask.stride(-1) == 1 and mask.shape[-1] == 64 for mask in seen)
    assert all(mask.untyped_storage().nbytes() == 64 * 4 for mask in seen)


def test_a_cpu_says_which_route_a_cuda_training_call_takes_and_why():
    efficient = "SDPA + stored bias (memory-efficient, which returns the bias gradient{}; the flash kernel takes no "
    efficient += "bias)"
    assert routes.cuda_training_routes(64, torch.float32, 0.1) == {
        "sdpa": efficient.format(" and has dropout"),
        "flex_attention": "refused: flex attention has no attention dropout, and this model's is 0.1",
    }
    assert routes.cuda_training_routes(64, torch.bfloat16, 0.0) == {
        "sdpa": efficient.format(""),
        "flex_attention": "flex, offset table in score_mod (no (H, n, n) bias)",
    }
    assert routes.cuda_training_routes(12, torch.float16, 0.0) == {
        "sdpa": "SDPA + stored bias (math: the memory-efficient kernel needs heads of a multiple of 8 float16 values, "
        "these have 12)",
        "flex_attention": "refused: flex attention on CUDA needs heads of at least 16 dimensions (PyTorch's flex "
        "kernel does not compile smaller ones), and this model's have 12",
    }
    assert routes.cuda_training_routes(12, torch.float32, 0.0)["sdpa"].startswith("SDPA + stored bias (memory-eff")


class ManualStoredBias(attention.SdpaRoute):
    """A route written outside the package: softmax(q kᵀ · scale + mask + F) v by hand, for float32 inference."""

    name = "manual"

    def refusal(self, call: attention.SdpaCall) -> str | None:
        return "grad mode is on" if torch.is_grad_enabled() else None

    def run(self, call: attention.SdpaCall):
        bias = attention.logits.merge_bias(call.mask, call.kernels(call.layer, call.length, call.bias_dtype))
        scale = call.scaling if call.scaling is not None else call.query.shape[-1] ** -0.5
        weights = (call.query @ call.key.transpose(-1, -2) * scale + bias).softmax(-1)
        return (weights @ call.value).transpose(1, 2).contiguous(), None


def test_a_new_route_is_an_object_in_a_policy(monkeypatch):
    """A route is one object placed in a policy, passed with the model call: every layer's call takes it (here
    before the stored-bias route), with the default route's outputs."""
    recorder = RecordingRoute().install(monkeypatch)
    manual = ManualStoredBias()
    policy = attention.SdpaPolicy((attention.PLAIN, manual, attention.STORED_BIAS))
    config = tiny_config("bert", tisa={"num_kernels": 2, "init": "random"})
    model = AutoModel.from_config(config, attn_implementation="sdpa").eval()
    input_ids, mask = padded(config, 12)
    with torch.no_grad():
        expected = model(input_ids=input_ids, attention_mask=mask).last_hidden_state
        output = model(input_ids=input_ids, attention_mask=mask, tisa_sdpa_policy=policy).last_hidden_state
    layers = config.num_hidden_layers
    assert recorder.taken == [attention.STORED_BIAS] * layers + [manual] * layers
    torch.testing.assert_close(output, expected, atol=1e-5, rtol=1e-5)
    assert attention.DEFAULT_SDPA_POLICY.without(attention.BANDED).routes == (
        attention.PLAIN,
        attention.BLOCKWISE,
        attention.TRAINABLE_BIAS,
        attention.STORED_BIAS,
    )


@requires_extra("analysis")
def test_bench_times_the_fused_route_against_stock_sdpa_on_cuda_only():
    from tisa_hf.performance import bench, cases

    with pytest.raises(UsageError, match=r"^--implementations fused times the fused TISA kernel, which runs on CUDA"):
        bench.parse_args(["--device", "cpu", "--implementations", "fused", "--output", "/dev/null"])
    args = bench.parse_args(["--device", "cpu", "--output", "/dev/null"])
    assert args.implementations == ["sdpa", "eager"]  # on CUDA: and fused
    args.implementations = ["sdpa", "eager", "fused"]
    assert [case.label() for case in bench.model_cases(args, "train", "float32")[-1]] == [
        "train fused 2x512 float32 dropout 0.1"
    ] * 2
    replace = bench.model_cases(args, "replace", "float32")
    assert {pair[0].implementation for pair in replace} == {"sdpa", "fused"}
    seen = []
    for case in bench.model_cases(args, "infer", "float32")[-1]:
        bench.step_function(case, lambda **batch: seen.append(batch.get(attention.SDPA_POLICY_KWARG)))()
    assert seen == [None, attention.FUSED_SDPA_POLICY]  # stock sdpa against TISA on the fused route
    assert cases.bert_base_config("fused", 0.1)._attn_implementation == "sdpa"


def test_a_model_names_its_policy_in_its_config_and_keeps_it_when_saved(monkeypatch, tmp_path):
    """`TisaConfig.sdpa_policy` chooses every layer's policy (a call's `tisa_sdpa_policy` still comes first), is
    saved with the config, and may be set when loading any checkpoint; an unknown name is refused in one line."""
    seen = []
    choose = attention.SdpaPolicy.choose
    monkeypatch.setattr(
        attention.SdpaPolicy, "choose", lambda policy, call: seen.append(policy) or choose(policy, call)
    )
    config = tiny_config("bert", tisa={"num_kernels": 2, "init": "random", "sdpa_policy": "fused"})
    model = AutoModel.from_config(config, attn_implementation="sdpa").eval()
    input_ids, mask = padded(config, 8)
    with torch.no_grad():
        model(input_ids=input_ids, attention_mask=mask)
        model(input_ids=input_ids, attention_mask=mask, tisa_sdpa_policy=attention.policy.STANDARD_SDPA_POLICY)
    layers = config.num_hidden_layers
    assert seen == [attention.FUSED_SDPA_POLICY] * layers + [attention.policy.STANDARD_SDPA_POLICY] * layers
    model.save_pretrained(tmp_path)
    assert AutoModel.from_pretrained(tmp_path).config.tisa.sdpa_policy == "fused"
    settings = {**model.config.tisa.to_dict(), "sdpa_policy": "standard"}
    assert AutoModel.from_pretrained(tmp_path, tisa=settings).config.tisa.sdpa_policy == "standard"
    with pytest.raises(ValueError, match=r"^TisaConfig.sdpa_policy must be one of standard, fused or None; got 'x'\.$"):
        tisa_hf.TisaConfig(sdpa_policy="x")
    assert list(attention.policy.NAMED_SDPA_POLICIES) == list(tisa_hf.config.SDPA_POLICIES)


def test_the_fused_route_says_which_condition_a_call_lacks(monkeypatch):
    """One condition changed at a time (Triton, the device, the dtype, the mask), each with its own reason.

    The route's refusal reads only flags, so the test runs where Triton is absent (torch's CPU wheels) too.
    """
    monkeypatch.setattr(attention.fused_route.limits, "TRITON_INTERPRETED", False)
    monkeypatch.setattr(attention.fused_route.limits, "TRITON_FOUND", False)
    kernels = TisaPositionBias(1, 2, 1)
    query = torch.zeros(1, 2, 8, 16)

    def refusal(query=query, mask=None):
        return attention.FUSED.refusal(attention.SdpaCall(query, query, query, mask, 0.0, None, kernels, 0))

    assert refusal() == "Triton is not installed"
    monkeypatch.setattr(attention.fused_route.limits, "TRITON_FOUND", True)
    assert refusal() == "the query is on cpu: the Triton kernels run on CUDA (on the CPU interpreted only)"
    monkeypatch.setattr(attention.fused_route.limits, "TRITON_INTERPRETED", True)
    assert refusal() is None
    assert refusal(query.bfloat16()) == "bfloat16 needs compute capability 8.0 (and a GPU)"
    assert refusal(mask=torch.zeros(1, 1, 8, 8)).startswith("the padding mask is not boolean")
    assert refusal(mask=torch.ones(1, 1, 8, 8, dtype=torch.bool)) is None
