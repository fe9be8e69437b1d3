"""A run's predictions, `predictions.json` beside its metrics.json: per evaluated split (GLUE: the dev splits;
documents: validation and test) the model's logits, the gold labels and, where examples have ids (documents),
their ids, so that a report can recompute the task's metric on resampled examples and check that paired runs
scored the same ones. Plain JSON, read without pickle."""

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
    """One split: `logits` (examples, labels), the STS-B score in a single column, the gold `labels`, and the
    examples' `ids` where they have them."""

    logits: np.ndarray
    labels: np.ndarray
    ids: tuple[str, ...] | None = None


@dataclass(frozen=True)
class RunPredictions:
    """The predictions of the model a run saved (`step`: the training step of its weights)."""

    task: str
    step: int
    splits: dict[str, SplitPredictions]

    def to_json(self) -> dict[str, Any]:
        splits = {
            name: {
                "logits": split.logits.tolist(),
                "labels": split.labels.tolist(),
                **({"ids": list(split.ids)} if split.ids is not None else {}),
            }
            for name, split in self.splits.items()
        }
        return {"task": self.task, "step": self.step, "splits": splits}

    @classmethod
    def from_json(cls, document: dict[str, Any]) -> RunPredictions:
        splits = {
            name: SplitPredictions(
                np.asarray(split["logits"], dtype=np.float32),
                np.asarray(split["labels"]),
                tuple(split["ids"]) if "ids" in split else None,
            )
            for name, split in document["splits"].items()
        }
        return cls(task=document["task"], step=document["step"], splits=splits)


def read_predictions(run_dir: str | Path) -> RunPredictions:
    path = RunFolder(run_dir).predictions_file
    if not path.is_file():
        raise UsageError(f"{path} does not exist: the run was made before runs saved their dev predictions; rerun it.")
    return RunPredictions.from_json(json.loads(path.read_text()))
