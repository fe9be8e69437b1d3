"""A call of `tisa_sdpa` as its routes see it, and what a route is: an object that says whether it applies to a call,
runs it, and describes itself (for `tisa-hf env`). The routes are tried in the order of a policy (`policy.py`)."""

from __future__ import annotations

from dataclasses import dataclass, field

import torch
from torch import nn
from torch.nn.attention import SDPBackend

from ..kernels import TisaPositionBias
from . import logits
from .logits import bias_dtype

# The dtypes of PyTorch's SDPA kernels that return a log-sum-exp (the CPU's flash, CUDA's memory-efficient), which the
# trainable-bias and banded routes call directly, and the attention arguments no route that calls an attention kernel
# directly (those two, the fused route) can take.
LOG_SUM_EXP_DTYPES = (torch.float32,)
UNSUPPORTED_DIRECT_KWARGS = ("position_bias", "cache", "softcap", "s_aux")
_SDPA_BACKENDS = {
    int(backend): name
    for backend, name in (
        (SDPBackend.MATH, "math"),
        (SDPBackend.FLASH_ATTENTION, "flash"),
        (SDPBackend.EFFICIENT_ATTENTION, "efficient"),
        (SDPBackend.CUDNN_ATTENTION, "cudnn"),
    )
}


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
    def tokens(self) -> str:
        """The call's length as a refusal names it; inside a compiled graph without the number, which would fix the
        graph to that length (formatting a symbolic size specialises it, and the next length compiles again)."""
        return "this many tokens" if torch.compiler.is_compiling() else f"{self.length} tokens"

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

    def packed_refusal(self) -> str | None:
        """Why a route that reads the bias from the offset table by token places cannot take a row of packed
        sequences, whose bias is gathered per row at its position ids' offsets (`biased_mask`), or None."""
        return (
            "a row of packed sequences takes its bias per row, at its position ids' offsets"
            if self.positions is not None
            else None
        )

    def unsupported_arguments_refusal(self) -> str | None:
        """Why a route that calls an attention kernel directly cannot take the call's arguments, or None."""
        passed = [name for name in UNSUPPORTED_DIRECT_KWARGS if self.kwargs.get(name) is not None]
        return (
            f"the call passes {', '.join(passed)}, which no attention kernel called directly takes" if passed else None
        )

    def long_inference_refusal(self) -> str | None:
        """Why the call is not one for the routes that never store the (H, n, n) bias (no gradient reaches the
        kernels, and every layer's bias at this length would not fit the kernels' cache), or None."""
        if self.kernels.needs_grad():
            return "a gradient reaches the kernels (it is an inference route)"
        if self.kernels.fits_cache(self.length, self.bias_dtype):
            return f"every layer's bias at {self.tokens} fits the kernels' cache, which holds it"
        return None


# The refusal every route that adds TISA's bias gives a layer without kernels.
NO_KERNELS = "the layer has no TISA kernels (S = 0, or switched off)"


class SdpaRoute:
    """A route of `tisa_sdpa`: `name` as `tisa-hf env` prints it, its `refusal` of a call (why it does not run it,
    or None where it does: it `applies`), `run` on a call (the output as transformers' attention functions return
    it, (B, n, H, d), and no weights)."""

    name: str

    def refusal(self, call: SdpaCall) -> str | None:
        """Why this route does not run `call`, in a clause `tisa-hf env` prints, or None where it does."""
        raise NotImplementedError

    def applies(self, call: SdpaCall) -> bool:
        return self.refusal(call) is None

    def run(self, call: SdpaCall) -> tuple[torch.Tensor, None]:
        raise NotImplementedError

    def describe(self, call: SdpaCall) -> str:
        """The route and the SDPA backend PyTorch picks for the call with a stored bias."""
        return f"{self.name} ({sdpa_backend(call.query, call.key, stand_in_bias(call), call.dropout)})"

    def __repr__(self) -> str:
        return f"<{self.name}>"


def stand_in_bias(call: SdpaCall, rows: int | None = None) -> torch.Tensor:
    """A bias of the call's shape (`rows` query rows) without its size, for PyTorch's backend choice: one row, expanded.
    Its last dimension keeps stride 1, as the real bias's does: PyTorch's flash and memory-efficient kernels require
    that of a mask and otherwise fall back to math."""
    length, heads = call.length, call.query.shape[1]
    requires_grad = call.kernels is not None and call.kernels.needs_grad()
    row = torch.zeros(1, 1, 1, length, dtype=call.bias_dtype, device=call.query.device, requires_grad=requires_grad)
    return row.expand(1, heads, rows or length, length)


def sdpa_backend(query: torch.Tensor, key: torch.Tensor, mask: torch.Tensor | None, dropout: float) -> str:
    """The backend PyTorch's `scaled_dot_product_attention` picks for these inputs (flash, efficient, cudnn or
    math), as `tisa-hf env` names it, from the choice function it dispatches with."""
    choice = torch._fused_sdp_choice(query, key, key, mask, dropout, False)
    return _SDPA_BACKENDS.get(choice, f"backend {choice}")
