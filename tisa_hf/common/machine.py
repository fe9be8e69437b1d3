"""Where a number was measured: the software versions and the machine, recorded beside every run's results so that
a table can say which machine produced it (wall times compare only within one machine)."""

from __future__ import annotations

import os
import platform
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

import numpy as np
import torch
import transformers

from .. import __version__
from ..errors import UsageError


def _installed(package: str) -> str | None:
    try:
        return version(package)
    except PackageNotFoundError:
        return None


def checked_device(name: str | None) -> torch.device:
    """A --device option as a torch device, checked against what this torch can use (default: cuda when
    available); a UsageError when it cannot be."""
    if name is None:
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError as error:
        raise UsageError(f"--device {name}: {error}; use cpu, cuda or cuda:N.") from error
    if device.type == "cuda" and not torch.cuda.is_available():
        raise UsageError(f"--device {name}, but this torch sees no CUDA device; use --device cpu.")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise UsageError(f"--device {name}, but only {torch.cuda.device_count()} CUDA device(s) are visible.")
    return device


def versions() -> dict[str, str | None]:
    """tisa-hf, Python and the libraries a result depends on (accelerate and datasets read from their package
    metadata, so that recording them imports neither)."""
    return {
        "tisa_hf": __version__,
        "python": platform.python_version(),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "accelerate": _installed("accelerate"),
        "datasets": _installed("datasets"),
        "numpy": np.__version__,
    }


def processor_name() -> str:
    """The CPU's model name. Read from /proc/cpuinfo on Linux, where `platform.processor()` gives only the
    architecture; elsewhere `platform.processor()` (macOS and Windows give the model there)."""
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.is_file():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return platform.processor() or platform.machine()


def machine(device: torch.device | str = "cpu") -> dict[str, Any]:
    """The machine a run used: its CPU (model, cores, torch's threads) and, on CUDA, the GPU's name."""
    device = torch.device(device)
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else None
    return {
        "device": device.type,
        "gpu": gpu,
        "processor": processor_name(),
        "cpu_count": os.cpu_count(),
        "torch_threads": torch.get_num_threads(),
    }


def describe_machine(record: dict[str, Any] | None) -> str:
    """A `machine` record in words: "on cpu (AMD EPYC, 2 cores, 2 torch threads)", "on cuda (NVIDIA H100)", or
    "with no machine recorded" for records written before runs recorded it."""
    if not record:
        return "with no machine recorded"
    if record["device"] == "cuda":
        return f"on cuda ({record['gpu']})"
    cores = f"{record['cpu_count']} cores, {record['torch_threads']} torch threads"
    return f"on {record['device']} ({record['processor']}, {cores})"
