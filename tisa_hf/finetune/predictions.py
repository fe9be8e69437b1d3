"""A GLUE run's dev-set predictions, `predictions.json` beside its metrics.json: per dev split the model's logits
and the gold labels, so that a report can recompute the task's metric on resampled dev examples. Plain JSON,
read without pickle."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import UsageError
from .run_folder import RunFolder


@dataclass(frozen=True)
class SplitPredictions:
    """One dev split: `logits` (examples, labels), the STS-B score in a single column, and the gold `labels`."""

    logits: np.ndarray
    labels: np.ndarray


@dataclass(frozen=True)
class RunPredictions:
    """The predictions of the model a run saved (`step`: the training step of its weights)."""

    task: str
    step: int
    splits: dict[str, SplitPredictions]

    def to_json(self) -> dict[str, Any]:
        splits = {
            name: {"logits": split.logits.tolist(), "labels": split.labels.tolist()}
            for name, split in self.splits.items()
        }
        return {"task": self.task, "step": self.step, "splits": splits}

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> RunPredictions:
        splits = {
            name: SplitPredictions(np.asarray(split["logits"], dtype=np.float32), np.asarray(split["labels"]))
            for name, split in document["splits"].items()
        }
        return cls(task=document["task"], step=document["step"], splits=splits)


def read_predictions(run_dir: str | Path) -> RunPredictions:
    path = RunFolder(run_dir).predictions_file
    if not path.is_file():
        raise UsageError(f"{path} does not exist: the run was made before runs saved their dev predictions; rerun it.")
    return RunPredictions.from_json(json.loads(path.read_text()))
