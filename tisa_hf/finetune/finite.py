"""Non-finite numbers stop a run instead of becoming its result: a training loss that diverged, an evaluation that
gave no score, and a record that standard JSON cannot hold (Python's `json` writes NaN and Infinity, which other
JSON readers refuse)."""

from __future__ import annotations

import json
import math
from typing import Any

import torch
from accelerate import Accelerator
from torch import nn

from ..errors import UsageError
from .arguments import TrainingArguments


class TrainingDiverged(UsageError):
    """The training loss or the gradients became NaN or infinite: the settings drive the weights out of range."""


def check_finite_step(
    accelerator: Accelerator, model: nn.Module, losses: torch.Tensor, step: int, args: TrainingArguments
) -> None:
    """Raises `TrainingDiverged` unless `losses` (the sum of the losses since the last logging step, each of which
    was finite when it was checked) and the gradients are finite.

    Called once per optimizer step, before gradient clipping and the optimizer step, so that no update is made
    from a non-finite loss or gradient (clipping turns an infinite gradient into NaNs, and AdamW makes every
    weight it reaches NaN). Under fp16 the gradient scaler skips steps with infinite gradients by design, so only
    the loss is checked there. Its cost is one norm over the gradients (clipping takes another) and reading two
    numbers at once: about 0.2% of a MiniLM step on the CPU; on an accelerator the read waits for the backward
    pass, which the optimizer step waits for anyway (transformers' Trainer reads its loss every step too). With
    several processes, they sum their losses first so that all of them stop together; the gradients are the same
    on every process by then."""
    total = accelerator.reduce(losses.detach(), reduction="sum") if accelerator.num_processes > 1 else losses
    grads = [parameter.grad for parameter in model.parameters() if parameter.grad is not None]
    check_grads = accelerator.scaler is None and grads
    norm = torch.nn.utils.get_total_norm(grads).to(total.device) if check_grads else torch.zeros_like(total)
    loss_value, norm_value = torch.stack([total.float(), norm.float()]).tolist()
    if math.isfinite(loss_value) and math.isfinite(norm_value):
        return
    remedies = [f"lower --learning-rate (now {args.learning_rate:g})"]
    if args.max_grad_norm == 0:
        remedies.append("clip gradients with --max-grad-norm 1.0")
    if args.mixed_precision != "no":
        remedies.append(f"train in fp32 (--mixed-precision no instead of {args.mixed_precision})")
    remedy = "; or ".join(remedies)
    what = (
        f"The training loss is {loss_value}" if not math.isfinite(loss_value) else f"The gradient norm is {norm_value}"
    )
    raise TrainingDiverged(
        f"{what} at step {step} of {args.max_steps}: training diverged, so the run stops "
        f"without saving this model or metrics (checkpoints of earlier steps in {args.output_dir} are kept). "
        f"{remedy[0].upper()}{remedy[1:]}, and train again with --overwrite-output-dir."
    )


def non_finite_entries(document: Any, path: str = "") -> list[tuple[str, float]]:
    """(dotted key path, value) of every NaN or infinite float in a JSON-like document."""
    if isinstance(document, float):
        return [] if math.isfinite(document) else [(path, document)]
    if isinstance(document, dict):
        items = document.items()
    elif isinstance(document, (list, tuple)):
        items = enumerate(document)
    else:
        return []
    return [entry for key, value in items for entry in non_finite_entries(value, f"{path}.{key}" if path else str(key))]


def check_finite_metrics(metrics: dict[str, Any], step: int) -> None:
    """Raises unless every number of an evaluation is finite: a NaN score ranks nothing and reports nothing."""
    bad = non_finite_entries(metrics)
    if bad:
        listed = ", ".join(f"{name} = {value}" for name, value in bad)
        raise UsageError(
            f"The evaluation at step {step} gave {listed}, which is no score (a correlation is undefined when all "
            "predictions are equal: the model collapsed). Lower --learning-rate, or check the dev data, and train "
            "again with --overwrite-output-dir."
        )


def finite_json(document: Any, name: str, **dumps: Any) -> str:
    """`document` as standard JSON (`allow_nan=False`), or a UsageError naming `name` and the non-finite keys."""
    bad = non_finite_entries(document)
    if bad:
        listed = ", ".join(f"{key} = {value}" for key, value in bad)
        raise UsageError(
            f"{name} would hold non-finite numbers ({listed}), which standard JSON cannot; it is not written."
        )
    return json.dumps(document, allow_nan=False, **dumps)
