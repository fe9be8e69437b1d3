"""What the fused Triton kernels take, as facts the route and `tisa-hf env` read without importing Triton: dtypes,
head sizes, lengths, the compute capabilities of bf16 and of pipelined loads, and whether Triton is there (or runs
interpreted on the CPU)."""

from __future__ import annotations

import importlib.util
import os

import torch

DTYPES = (torch.float32, torch.float16, torch.bfloat16)
# The largest head the tiles hold (padded to a power of two with masks).
MAX_HEAD_DIM = 128
# The dropout's Philox counter is i · n + j in 32 bits.
MAX_LENGTH = 46_340
# CUDA compute capabilities: bf16 (PyTorch's SDPA kernels and Triton's dot products) from 8.0 (Ampere); the Triton
# kernels pipeline their loads in 2 stages (async copies) from 8.0, in 1 below it, which keeps Turing's tiles within
# its 64 KiB of shared memory.
BF16_FROM = PIPELINED_FROM = (8, 0)
TRITON_FOUND = importlib.util.find_spec("triton") is not None
# Triton reads TRITON_INTERPRET when it is imported: a process that set it runs the kernels on CPU tensors (slowly).
TRITON_INTERPRETED = os.environ.get("TRITON_INTERPRET") == "1"
