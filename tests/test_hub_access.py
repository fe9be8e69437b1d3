"""The checks made before a model or dataset is loaded: the Hub probe, cached models read offline, and the
messages for what cannot be loaded. The Hub is never contacted."""

import importlib

import huggingface_hub
import pytest
from huggingface_hub import constants, errors

from tisa_hf.common import hub_access
from tisa_hf.common.hub_access import ModelSource, model_source


class Session:
    def __init__(self, error: Exception | None = None):
        self.error, self.calls = error, []

    def head(self, url: str, timeout: float):
        self.calls.append((url, timeout))
        if self.error is not None:
            raise self.error


def test_probe_answers_within_its_timeout(monkeypatch):
    answering = Session()
    monkeypatch.setattr(hub_access, "get_session", lambda: answering)
    assert hub_access.hub_reachable() is True
    assert answering.calls == [(constants.ENDPOINT, hub_access.PROBE_TIMEOUT_S)]
    client = importlib.import_module(errors.HTTPError.__module__)
    silent = Session(client.ConnectError("[Errno -2] Name or service not known"))
    monkeypatch.setattr(hub_access, "get_session", lambda: silent)
    assert hub_access.hub_reachable() is False
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert hub_access.hub_reachable() is False and len(silent.calls) == 1  # offline: not even asked


def test_a_cached_model_is_read_from_the_cache_when_the_hub_is_out_of_reach(monkeypatch):
    monkeypatch.setattr(huggingface_hub, "try_to_load_from_cache", lambda repo_id, filename: f"/cache/{filename}")
    monkeypatch.setattr(hub_access, "hub_reachable", lambda timeout=None: False)
    assert model_source("org/model") == ModelSource("org/model", local_files_only=True)
    monkeypatch.setattr(hub_access, "hub_reachable", lambda timeout=None: True)
    assert model_source("org/model") == ModelSource("org/model", local_files_only=False)


def test_local_paths_are_checked_without_the_hub(tmp_path):
    assert model_source(str(tmp_path), "--tokenizer", needs_config=False) == ModelSource(str(tmp_path))
    with pytest.raises(ValueError, match=r"^--model .* is a folder without config.json, so not a saved model"):
        model_source(str(tmp_path))
    (tmp_path / "config.json").write_text("{}")
    assert model_source(str(tmp_path)) == ModelSource(str(tmp_path))
    (tmp_path / "weights.bin").write_bytes(b"")
    with pytest.raises(ValueError, match=r"^--model .*weights\.bin is a file; it takes a model folder or a Hub id"):
        model_source(str(tmp_path / "weights.bin"))
    with pytest.raises(ValueError, match=r"^--tokenizer .*/missing: no such folder, and not a Hub model id either"):
        model_source(str(tmp_path / "missing"), option="--tokenizer")
