"""Whether the machine can train in the asked-for precision: Accelerate trains in float32 without a word when
fp16 is asked for on the CPU, and refuses bf16 on a GPU without it in words that name no fix."""

from __future__ import annotations

import torch
from accelerate.utils import parse_flag_from_env

from ..errors import UsageError


def training_device() -> torch.device:
    """The device Accelerate will train on, known before it starts (starting its state here would start it without
    the settings the Accelerator passes): the CPU when ACCELERATE_USE_CPU is set or there is no accelerator."""
    accelerator = None if parse_flag_from_env("ACCELERATE_USE_CPU") else torch.accelerator.current_accelerator()
    return torch.device("cpu") if accelerator is None else accelerator


def check_mixed_precision(precision: str, device: torch.device) -> None:
    """Refuses `--mixed-precision` `precision` on `device` (where the run trains) when it cannot be had there."""
    if precision == "fp16" and device.type == "cpu":
        raise UsageError(
            "--mixed-precision fp16 needs a GPU, and this run trains on the CPU, where it would train in float32; "
            "use --mixed-precision bf16 (the CPU's autocast) or no."
        )
    if precision == "bf16" and device.type == "cuda" and not torch.cuda.is_bf16_supported():
        raise UsageError(
            f"--mixed-precision bf16 needs a GPU with bfloat16, and {torch.cuda.get_device_name(device)} has none; "
            "use --mixed-precision fp16 or no."
        )
