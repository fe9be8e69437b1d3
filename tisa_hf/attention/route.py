"""A call of `tisa_sdpa` as its routes see it, and what a route is: an object that says whether it applies to a call,
runs it, and describes itself (for `tisa-hf env`). The routes are tried in the order of a policy (`policy.py`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn

from ..kernels import TisaPositionBias
from . import backends, logits
from .logits import bias_dtype

# The dtypes of PyTorch's fused attention kernels that return a log-sum-exp (the trainable-bias and banded routes), and
# the attention arguments they cannot take.
FUSED_DTYPES = (torch.float32,)
UNSUPPORTED_FUSED_KWARGS = ("position_bias", "cache", "softcap", "s_aux")
# CUDA compute capabilities: bf16 (PyTorch's kernels and Triton's dot products) from 8.0 (Ampere); the fused TISA
# kernels pipeline their loads in 2 stages (async copies) from 8.0, in 1 below it, which keeps Turing's tiles within
# its 64 KiB of shared memory.
BF16_FROM = PIPELINED_FROM = (8, 0)


@dataclass(frozen=True)
class SdpaCall:
    """One call: the inputs transformers hands over (the query already length-scaled), the layer's kernels (None:
    S = 0 or switched off) and its layer (None: a call described without one, whose banded route is not
    considered); `module`, `is_causal` and `kwargs` go on to transformers' own sdpa function. `positions`: the
    position ids of a row of packed sequences (`logits.packed_positions`), None for every other call."""

    query: torch.Tensor
    key: torch.Tensor
    value: torch.Tensor
    mask: torch.Tensor | None
    dropout: float
    scaling: float | None
    kernels: TisaPositionBias | None
    layer: int | None
    module: nn.Module | None = None
    is_causal: bool | None = None
    kwargs: dict = field(default_factory=dict)
    positions: torch.Tensor | None = None

    @property
    def length(self) -> int:
        return self.query.shape[2]

    @property
    def bias_dtype(self) -> torch.dtype:
        return bias_dtype(self.query)

    @property
    def in_decoder(self) -> bool:
        """Whether the module is a decoder's self-attention, whose calls are causal."""
        return bool(getattr(self.module, "is_causal", False))

    @property
    def is_square(self) -> bool:
        """As many queries as keys: no step on a KV cache."""
        return self.key.shape[2] == self.length

    def masks_causally_itself(self) -> bool:
        """Whether the route must add the causal mask itself (`logits.masks_causally_itself`)."""
        return logits.masks_causally_itself(self.module, self.is_causal, self.mask, self.query)

    def biased_mask(self) -> torch.Tensor:
        """The call's additive mask with its layer's bias (`logits.biased_mask`)."""
        causal = self.masks_causally_itself()
        return logits.biased_mask(self.kernels, self.layer, self.query, self.key, self.mask, causal, self.positions)

    def takes_fused_arguments(self) -> bool:
        """Whether the call has none of the arguments the fused attention kernels cannot take."""
        return not any(self.kwargs.get(name) is not None for name in UNSUPPORTED_FUSED_KWARGS)

    def is_long_inference(self) -> bool:
        """No gradient reaches the kernels and every layer's bias at this length would not fit the kernels' cache:
        the routes that never store the (H, n, n) bias."""
        return not self.kernels.needs_grad() and not self.kernels.fits_cache(self.length, self.bias_dtype)


class SdpaRoute:
    """A route of `tisa_sdpa`: `name` as `tisa-hf env` prints it, `applies` to a call, `run` on it (the output as
    transformers' attention functions return it, (B, n, H, d), and no weights)."""

    name: str

    def applies(self, call: SdpaCall) -> bool:
        raise NotImplementedError

    def run(self, call: SdpaCall) -> tuple[torch.Tensor, None]:
        raise NotImplementedError

    def describe(self, call: SdpaCall) -> str:
        """The route and the SDPA backend PyTorch picks for the call with a stored bias."""
        return f"{self.name} ({backends.sdpa_backend(call.query, call.key, stand_in_bias(call), call.dropout)})"

    def __repr__(self) -> str:
        return f"<{self.name}>"


def stand_in_bias(call: SdpaCall, rows: int | None = None) -> torch.Tensor:
    """A bias of the call's shape (`rows` query rows) without its size, for PyTorch's backend choice: one row, expanded.
    Its last dimension keeps stride 1, as the real bias's does: PyTorch's fused attention kernels require that of a mask
    and otherwise fall back to math."""
    length, heads = call.length, call.query.shape[1]
    requires_grad = call.kernels is not None and call.kernels.needs_grad()
    row = torch.zeros(1, 1, 1, length, dtype=call.bias_dtype, device=call.query.device, requires_grad=requires_grad)
    return row.expand(1, heads, rows or length, length)
