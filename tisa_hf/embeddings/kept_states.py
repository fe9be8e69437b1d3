"""Whole reads kept on disk: a document's final token states from one forward pass, float32, kept once per model
and reading so that every read-out and window length of it reuses one read (`--token-states`).

A whole read is a retrieval run's main cost on a CPU (a 20k-token meeting, about 25 s for MiniLM), and it is the same
read whether a run pools each window from it (late chunking), scores each window's tokens by MaxSim (`late:`), or
cuts windows of another W. The states are kept exactly as read (float32; about 1.5 KB a token at 384 dimensions),
so a run that reuses them scores bit for bit as one that reads again. They are keyed by the loaded weights and the
reading, so a re-made model or another reading never reuses another's states.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import torch

from ..common.result_files import save_array

STATES_FILE = "model.json"  # what the states of a folder were read by, for a person looking at it


def weights_digest(model: torch.nn.Module) -> str:
    """sha256 of the model's parameters and buffers, names and values, in name order."""
    hasher = hashlib.sha256()
    for name, tensor in sorted(model.state_dict().items()):
        hasher.update(name.encode())
        hasher.update(str(tensor.dtype).encode())
        hasher.update(tensor.detach().cpu().contiguous().numpy().tobytes())
    return hasher.hexdigest()


class KeptTokenStates:
    """The whole reads of one loaded model read one way, kept under `root`/KEY/, one .npy a document (its token ids'
    digest): `KEY` covers the weights as loaded (before any stretching) and the reading, so `late:X` and `X` share
    their reads and a re-made model does not. `reused` counts the documents read from disk this run."""

    def __init__(self, root: Path, model: torch.nn.Module, reading: str, system: str) -> None:
        weights = weights_digest(model)
        key = hashlib.sha256(f"{reading}\n{weights}".encode()).hexdigest()[:16]
        self.folder = Path(root) / key
        self.reused = 0
        about = self.folder / STATES_FILE
        if not about.is_file():
            self.folder.mkdir(parents=True, exist_ok=True)
            about.write_text(json.dumps({"system": system, "reading": reading, "weights_sha256": weights}, indent=1))

    def path(self, document: list[int]) -> Path:
        return self.folder / f"{hashlib.sha256(np.asarray(document, dtype=np.int64).tobytes()).hexdigest()[:32]}.npy"

    def read(
        self, document: list[int], read_whole: Callable[[list[int]], torch.Tensor], device: torch.device
    ) -> torch.Tensor:
        """The document's (tokens, dim) float32 states on `device`: the kept ones where there are, else
        `read_whole(document)`'s, kept before they are returned."""
        path = self.path(document)
        if path.is_file():
            self.reused += 1
            return torch.from_numpy(np.load(path)).to(device)
        states = read_whole(document)
        save_array(path, states.cpu().numpy())
        return states
