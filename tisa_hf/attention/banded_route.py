"""The banded route: long inputs without gradients, in float32 on the CPU or CUDA, whose layer's f(k) is exactly 0
outside a band of offsets at most a quarter of the length wide (fitted and adapted Gaussians underflow to 0 a few
hundred tokens out; a far-field term never does), run as one operator (`banded/op.py`) over the banded computation
(`banded/`), which never builds the (H, n, n) bias."""

from __future__ import annotations

import torch

from .banded import op  # noqa: F401  (registers torch.ops.tisa_hf.banded_sdpa)
from .banded.sdpa import BANDED_MAX_WIDTH_SHARE, band_fits
from .route import LOG_SUM_EXP_DTYPES, NO_KERNELS, SdpaCall, SdpaRoute, sdpa_backend


class BandedRoute(SdpaRoute):
    name = "banded SDPA"

    def refusal(self, call: SdpaCall) -> str | None:
        if call.kernels is None:
            return NO_KERNELS
        if call.layer is None:
            return "a call described without its layer, whose band it reads"
        if call.in_decoder:
            return "a decoder's self-attention is causal"
        return call.packed_refusal() or call.long_inference_refusal() or banded_path_refusal(call)

    def run(self, call: SdpaCall) -> tuple[torch.Tensor, None]:
        table = call.kernels.offset_table(call.layer, call.length, call.bias_dtype)
        output = torch.ops.tisa_hf.banded_sdpa(call.query, call.key, call.value, call.mask, table, call.scaling)
        return output.transpose(1, 2).contiguous(), None

    def describe(self, call: SdpaCall) -> str:
        backend = sdpa_backend(call.query, call.key, None, call.dropout)
        return (
            f"{self.name} ({backend}) for a layer whose f(k) is 0 outside a band of at most "
            f"{BANDED_MAX_WIDTH_SHARE:g}n offsets"
        )


def banded_path_refusal(call: SdpaCall) -> str | None:
    """Why a long-input inference call cannot take `banded_biased_sdpa`, or None where it can: on the CPU or CUDA in
    float32 (PyTorch's SDPA kernels that return the log-sum-exp), self-attention without dropout, grouped heads,
    gradients or an unsupported argument, without a far-field term (which is never 0), and with the layer's f(k)
    exactly 0 outside a band of offsets that, widened to hold 0, spans at most `BANDED_MAX_WIDTH_SHARE` of the length
    (read from the layer's own offset table at this length, `TisaPositionBias.nonzero_band`; inside a compiled graph
    `banded_sdpa` reads it when the call runs)."""
    query, length = call.query, call.length
    if query.device.type not in ("cpu", "cuda"):
        return f"the query is on {query.device.type}: the route runs on the CPU or CUDA"
    if query.dtype not in LOG_SUM_EXP_DTYPES or call.bias_dtype != query.dtype:
        return f"the logits are {call.bias_dtype}: the route runs in float32 only"
    if query.shape[1] != call.key.shape[1] or not call.is_square:
        return "queries and keys differ in heads or length (grouped heads, a KV cache)"
    if call.dropout:
        return f"attention dropout {call.dropout}"
    if call.kernels.far_field_slope is not None:
        return "the kernels' far-field term is never 0"
    if torch.is_grad_enabled():
        return "grad mode is on, and the route has no backward"
    unsupported = call.unsupported_arguments_refusal()
    if unsupported is not None:
        return unsupported
    if torch.compiler.is_compiling():
        return None  # the band is read when the call runs (`banded_sdpa`)
    if not band_fits(call.kernels.nonzero_band(call.layer, length, call.bias_dtype), length):
        return f"the layer's f(k) is not 0 outside a band of at most {BANDED_MAX_WIDTH_SHARE:g}n offsets"
    return None
