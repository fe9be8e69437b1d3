"""Which variant a finished run belongs to: its row label (TISA settings, adaptation, what a document run read), the
settings that tell variants apart, and the model whose table it belongs in."""

from __future__ import annotations

import json
from collections import defaultdict
from typing import Any

from ..finetune.run_folder import DOCUMENTS_KEY, SCHEDULE_SETTINGS

BASELINE = "baseline"
# Settings that do not change what a run learns: runs that differ only in these are seeds of one variant.
# (`num_train_epochs` and `warmup_ratio` act through the resolved `max_steps` and `warmup_steps`, which count.)
RUN_PLUMBING = frozenset(
    {
        "seed",
        "output_dir",
        "resume",
        "overwrite_output_dir",
        "resume_without_rng_state",
        "num_train_epochs",
        "warmup_ratio",
        "report_to",
        "no_tracking",
        "push_to_hub",
        "logging_steps",
        "checkpoint_steps",
        "torch_compile",
        "torch_compile_backend",
        "torch_compile_mode",
        "eval_batch_size",
        "data_dir",
        "train_file",
        "validation_file",
        "dataset_name",
        "test_file",
        "fold",  # a cross-validation fold is a replicate, like a seed
    }
)
# Settings that a document run's row label shows (`input_label`), so that they are not listed again.
INPUT_SETTINGS = frozenset({"max_seq_length", "truncation", "position_interpolation"})


def variant_label(tisa: dict[str, Any] | None, adapted: dict[str, Any] | None = None) -> str:
    """The row of a run: its TISA settings, and for a checkpoint of `tisa-hf adapt` how it was adapted."""
    if not tisa:
        label = BASELINE
    elif tisa["num_kernels"] == 0 and tisa.get("far_field", "none") == "none":
        label = "S=0 (bag of words)" if tisa["mode"] == "replace" else "S=0 (add)"
    else:
        far_field = f", far field {tisa['far_field']}" if tisa.get("far_field", "none") != "none" else ""
        label = f"TISA S={tisa['num_kernels']}{far_field} ({tisa['mode']})"
    return f"{label}, adapted ({adapted['objective']}, trained: {adapted['train']})" if adapted else label


def is_document_run(result: dict[str, Any]) -> bool:
    return DOCUMENTS_KEY in result


def input_label(config: dict[str, Any]) -> str:
    """What a document run read of each document: `head 512`, `head+tail 512`, or `interpolated 2048` (a plain
    model whose position table was stretched to the length)."""
    length = config.get("max_seq_length")
    if config.get("position_interpolation"):
        return f"interpolated {length}"
    return f"{config.get('truncation', 'head')} {length}"


def row_label(result: dict[str, Any]) -> str:
    """`variant_label`, and for a document run what it read (`input_label`)."""
    label = variant_label(result["tisa"], result.get("adapted"))
    return f"{label}, {input_label(result.get('config') or {})}" if is_document_run(result) else label


def compared_model(result: dict[str, Any]) -> str:
    """The model whose table a run belongs in: for a run fine-tuned from an adapted checkpoint, the model the
    adaptation started from, so that it is compared (and paired) with that model's baseline."""
    adapted = result.get("adapted")
    return adapted["from"] if adapted else result["model"]


def variant_order(label: str) -> tuple:
    return (0 if label.split(" (")[0] == BASELINE else 1, label)


def _defining_settings(result: dict[str, Any]) -> dict[str, str]:
    """The settings of a run that can tell it apart from another variant (TISA options only when TISA is on)."""
    config = result.get("config") or {}
    shown = INPUT_SETTINGS if is_document_run(result) else frozenset()
    return {
        name: json.dumps(value, sort_keys=True)
        for name, value in config.items()
        if name not in RUN_PLUMBING and name not in shown and (result["tisa"] or not name.startswith("tisa_"))
    }


def label_variants(results: list[dict[str, Any]]) -> None:
    """Sets every run's `variant`: the label of its TISA setting (`row_label`), followed by the settings in
    which runs of that label on one task differ, e.g. `baseline (learning_rate=0.0001)`, so that runs of different
    settings are never pooled as seeds of one variant."""
    groups: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for result in results:
        groups[(compared_model(result), row_label(result))].append(result)
    for (_, label), group in groups.items():
        settings = [_defining_settings(result) for result in group]
        # Only settings every run records: one that older runs lack did not exist yet, so they ran its default.
        shared = set.intersection(*(set(defining) for defining in settings))
        # The resolved schedule follows the training set's size, which differs between cross-validation folds: it
        # tells variants apart only between runs of one fold.
        values: dict[tuple[str, Any, str], set[str | None]] = defaultdict(set)
        for result, defining in zip(group, settings, strict=True):
            fold = (result.get("config") or {}).get("fold")
            for name in shared:
                values[(result["task"], fold if name in SCHEDULE_SETTINGS else None, name)].add(defining[name])
        differing = sorted({name for (_, _, name), seen in values.items() if len(seen) > 1})
        for result, defining in zip(group, settings, strict=True):
            shown = ", ".join(f"{name}={json.loads(defining[name])}" for name in differing)
            result["variant"] = f"{label} ({shown})" if differing else label
