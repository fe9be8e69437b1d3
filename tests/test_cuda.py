"""CUDA correctness of TISA's attention routes (skipped without a GPU): sdpa against eager with padding in every
precision, kernel-only training of a frozen encoder, replace mode far past the position table, flex attention's
kernel gradients, a checkpoint saved on the GPU read on the CPU, kernels fitted to a model on the GPU, late
interaction's MaxSim computed on the GPU, and an Inductor-compiled training step. The banded route's CUDA cases
are in test_banded.py."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModel, AutoModelForSequenceClassification

import tisa_hf  # noqa: F401  (registers TISA's model types)
from tests.fixtures import tiny_config

pytestmark = [pytest.mark.cuda, pytest.mark.core]
CUDA = torch.device("cuda")
# Heads of 16 dimensions, the smallest PyTorch's CUDA flex attention compiles (the tiny config's are 8).
FLEX_SIZES = {"hidden_size": 64, "intermediate_size": 64}
# Relative error (norm of the difference over the norm of the reference) allowed per precision: float32 agrees
# to rounding; bf16 keeps 8 bits of mantissa and fp16 11, and eager and sdpa round in different places.
TOLERANCE = {torch.float32: 1e-5, torch.bfloat16: 5e-2, torch.float16: 1e-2}


def padded(config, length: int, batch: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(1, config.vocab_size, (batch, length), generator=generator)
    mask = torch.ones(batch, length, dtype=torch.long)
    mask[1, length // 2 :] = 0
    mask[2, length - 3 :] = 0
    return input_ids.to(CUDA), mask.to(CUDA)


def relative_error(got: torch.Tensor, expected: torch.Tensor) -> float:
    return ((got.float() - expected.float()).norm() / expected.float().norm()).item()


def twin(implementation: str, config, weights: dict | None = None):
    """A CUDA model of `config` on `implementation`, with `weights` (kernels included) where given."""
    model = AutoModel.from_config(config, attn_implementation=implementation).to(CUDA)
    if weights is not None:
        model.load_state_dict(weights)
    return model


def outputs_and_kernel_grads(implementation, config, weights, input_ids, mask, dtype, frozen_encoder=False):
    model = twin(implementation, config, weights).train()
    for name, parameter in model.named_parameters():
        parameter.requires_grad_(name.startswith("tisa.") or not frozen_encoder)
    autocast = torch.autocast("cuda", dtype=dtype, enabled=dtype is not torch.float32)
    with autocast:
        output = model(input_ids=input_ids, attention_mask=mask).last_hidden_state
    keep = mask.bool()
    # A fixed random projection of the states: their mean square after the final LayerNorm is 1 whatever the
    # inputs, so a loss of that kind has no gradient to check.
    probe = torch.randn(output[keep].shape, generator=torch.Generator().manual_seed(2)).to(output.device)
    (output[keep].float() * probe).sum().backward()
    grads = [getattr(model.tisa, name).grad for name in ("amplitude", "sharpness", "center")]
    return output[keep], grads


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_sdpa_matches_eager_with_padding_outputs_and_kernel_grads(dtype):
    config = tiny_config("bert", tisa={"num_kernels": 3, "init": "random"})
    input_ids, mask = padded(config, 24)
    weights = twin("eager", config).state_dict()
    sdpa = outputs_and_kernel_grads("sdpa", config, weights, input_ids, mask, dtype)
    eager = outputs_and_kernel_grads("eager", config, weights, input_ids, mask, dtype)
    for got, expected in zip([sdpa[0], *sdpa[1]], [eager[0], *eager[1]], strict=True):
        assert torch.isfinite(got).all()
        assert relative_error(got, expected) < TOLERANCE[dtype]


def test_frozen_encoder_trains_its_kernels_through_sdpa():
    """With only the kernels requiring a gradient, CUDA's memory-efficient backward needs the query that
    `query_for_bias_only_backward` hands it (otherwise: "LSE is not correctly aligned")."""
    config = tiny_config("bert", tisa={"num_kernels": 3, "init": "random"})
    input_ids, mask = padded(config, 24)
    weights = twin("eager", config).state_dict()
    sdpa = outputs_and_kernel_grads("sdpa", config, weights, input_ids, mask, torch.float32, frozen_encoder=True)
    eager = outputs_and_kernel_grads("eager", config, weights, input_ids, mask, torch.float32, frozen_encoder=True)
    for got, expected in zip(sdpa[1], eager[1], strict=True):
        assert got.abs().sum() > 0 and relative_error(got, expected) < 1e-5


@pytest.mark.parametrize("implementation", ["sdpa", "flex_attention"])
def test_replace_mode_reads_eight_times_its_position_table(implementation):
    config = tiny_config("bert", **FLEX_SIZES, tisa={"num_kernels": 3, "mode": "replace", "init": "random"})
    input_ids, mask = padded(config, 8 * config.max_position_embeddings)
    model = twin(implementation, config).eval()
    model.tisa.cache_limit_bytes = 0  # sdpa: the blockwise route, no (H, n, n) bias stored
    eager = twin("eager", config, model.state_dict()).eval()
    with torch.no_grad():
        got = model(input_ids=input_ids, attention_mask=mask).last_hidden_state
        expected = eager(input_ids=input_ids, attention_mask=mask).last_hidden_state
    keep = mask.bool()
    torch.testing.assert_close(got[keep], expected[keep], atol=1e-4, rtol=1e-4)


def test_blockwise_route_with_misaligned_band_windows_matches_eager(monkeypatch):
    """Blocks of 7 rows: each block's bias is a window an odd number of floats into the band, which CUDA's
    memory-efficient kernel cannot read in place ("misaligned address"); no padding, so no mask to merge it into."""
    config = tiny_config("bert", tisa={"num_kernels": 3, "mode": "replace", "init": "random"})
    length = 8 * config.max_position_embeddings + 3
    input_ids = torch.randint(1, config.vocab_size, (1, length), generator=torch.Generator().manual_seed(3)).to(CUDA)
    model = twin("sdpa", config).eval()
    model.tisa.cache_limit_bytes = 0
    eager = twin("eager", config, model.state_dict()).eval()
    row_bytes = config.num_attention_heads * length * 4
    monkeypatch.setattr("tisa_hf.attention.blockwise.BLOCK_BIAS_BYTES", 7 * row_bytes)
    monkeypatch.setattr("tisa_hf.attention.blockwise.ACCELERATOR_BLOCK_ROWS", 7)
    with torch.no_grad():
        got = model(input_ids=input_ids).last_hidden_state
        expected = eager(input_ids=input_ids).last_hidden_state
    torch.testing.assert_close(got, expected, atol=1e-4, rtol=1e-4)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=str)
def test_flex_matches_eager_with_kernel_gradients(dtype):
    """The flex route's gradient reaches the kernels through its offset table."""
    config = tiny_config("bert", **FLEX_SIZES, tisa={"num_kernels": 3, "init": "random"})
    input_ids, mask = padded(config, 32)
    weights = twin("eager", config).state_dict()
    flex = outputs_and_kernel_grads("flex_attention", config, weights, input_ids, mask, dtype)
    eager = outputs_and_kernel_grads("eager", config, weights, input_ids, mask, dtype)
    for got, expected in zip([flex[0], *flex[1]], [eager[0], *eager[1]], strict=True):
        assert torch.isfinite(got).all()
        assert relative_error(got, expected) < TOLERANCE[dtype]


def test_flex_refuses_heads_smaller_than_its_cuda_kernel_compiles():
    config = tiny_config("bert", tisa={"num_kernels": 3, "init": "random"})  # heads of 8 dimensions
    input_ids, mask = padded(config, 16)
    model = twin("flex_attention", config).eval()
    with pytest.raises(ValueError, match="flex attention on CUDA needs heads of at least 16 dimensions") as refusal:
        model(input_ids=input_ids, attention_mask=mask)
    assert "this model's have 8: use attn_implementation='sdpa'" in str(refusal.value)


def test_checkpoint_saved_on_gpu_gives_identical_float32_logits_on_cpu(tmp_path):
    config = tiny_config("bert", num_labels=3, tisa={"num_kernels": 3, "init": "random"})
    model = AutoModelForSequenceClassification.from_config(config).to(CUDA).eval()
    input_ids, mask = padded(config, 16)
    model.save_pretrained(tmp_path)
    with torch.no_grad():
        on_gpu = model(input_ids=input_ids, attention_mask=mask).logits.cpu()
        loaded = AutoModelForSequenceClassification.from_pretrained(tmp_path).eval()
        assert loaded.device.type == "cpu"
        on_cpu = loaded(input_ids=input_ids.cpu(), attention_mask=mask.cpu()).logits
        moved = model.cpu()(input_ids=input_ids.cpu(), attention_mask=mask.cpu()).logits
    assert torch.equal(on_cpu, moved)  # the checkpoint holds exactly the GPU model's weights and kernels
    torch.testing.assert_close(on_cpu, on_gpu, atol=1e-5, rtol=1e-4)


def test_kernel_fit_of_profiles_on_the_gpu_is_the_cpu_fit_returned_there():
    offsets = torch.arange(-20, 21, dtype=torch.float32)
    profiles = torch.stack([torch.exp(-0.05 * (offsets - 3) ** 2), -0.5 * torch.exp(-0.3 * offsets**2)])
    on_cpu, on_gpu = tisa_hf.fit_kernels(profiles, 2), tisa_hf.fit_kernels(profiles.to(CUDA), 2)
    for name in ("amplitude", "sharpness", "center", "constant", "r2"):
        assert getattr(on_gpu, name).device.type == "cuda"
        assert torch.equal(getattr(on_gpu, name).cpu(), getattr(on_cpu, name))


def test_patching_a_model_on_the_gpu_fits_its_kernels_there():
    model = AutoModel.from_config(tiny_config("bert")).to(CUDA)
    profile = tisa_hf.extract_positional_profiles(model).toeplitz.profile
    expected = tisa_hf.fit_kernels(profile, 3, window=6)
    tisa_hf.patch(model, tisa_hf.TisaConfig(num_kernels=3, fit_window=6))
    assert model.tisa.amplitude.device.type == "cuda"
    torch.testing.assert_close(model.tisa.amplitude, expected.amplitude)
    torch.testing.assert_close(model.tisa.center, expected.center)


def test_late_interaction_on_the_gpu_equals_the_cpu_one(monkeypatch):
    from tisa_hf.embeddings.retrieval import ranking

    monkeypatch.setattr(ranking, "MAXSIM_BLOCK_PRODUCTS", 4096)  # blocks of 5 query tokens against 700 tokens
    generator = torch.Generator().manual_seed(0)
    documents = [torch.nn.functional.normalize(torch.randn(n, 32, generator=generator), dim=-1) for n in (700, 1, 300)]
    queries = [torch.nn.functional.normalize(torch.randn(n, 32, generator=generator), dim=-1).numpy() for n in (5, 9)]
    on_cpu, on_gpu = ranking.LateInteraction(queries), ranking.LateInteraction(queries, CUDA)
    for document in documents:
        torch.testing.assert_close(on_gpu(document.numpy()), on_cpu(document.numpy()), atol=1e-5, rtol=1e-5)
        torch.testing.assert_close(on_gpu(document.to(CUDA)), on_cpu(document.numpy()), atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float16], ids=str)
def test_inductor_compiled_training_on_the_gpu_equals_eager(dtype):
    """`torch.compile(fullgraph=True)` with Inductor on CUDA: outputs and kernel gradients of a padded batch within
    each precision's tolerance of eager, the backward included."""
    config = tiny_config("bert", tisa={"num_kernels": 3, "mode": "replace", "init": "random"})
    weights = twin("sdpa", config).state_dict()
    input_ids, mask = padded(config, 24)
    expected, expected_grads = outputs_and_kernel_grads("sdpa", config, weights, input_ids, mask, dtype)
    model = twin("sdpa", config, weights).train()
    compiled = torch.compile(model, fullgraph=True)
    with torch.autocast("cuda", dtype=dtype, enabled=dtype is not torch.float32):
        output = compiled(input_ids=input_ids, attention_mask=mask).last_hidden_state
    keep = mask.bool()
    probe = torch.randn(output[keep].shape, generator=torch.Generator().manual_seed(2)).to(output.device)
    (output[keep].float() * probe).sum().backward()
    assert relative_error(output[keep], expected) < TOLERANCE[dtype]
    for name, expected_grad in zip(("amplitude", "sharpness", "center"), expected_grads, strict=True):
        assert relative_error(getattr(model.tisa, name).grad, expected_grad) < TOLERANCE[dtype] * 10, name
