"""The fused route: TISA's attention in one Triton kernel pair (`fused/`), which reads the bias from the layer's
(H, 2n-1) offset table inside its tiles and reduces the table's gradient inside its backward, with attention dropout
and the padding mask; nothing of (B, H, n, n) is stored, forward or backward.

It applies to encoders' CUDA tensors (and to CPU tensors under Triton's interpreter, for the tests) of the dtypes and
head sizes the Triton kernels take, with a boolean padding mask (transformers' sdpa mask), and says which of these a
call lacks. It is in the fused policy, which a model names with `TisaConfig(sdpa_policy="fused")` (`policy.py`), until
GPU measurements choose it by speed (docs/performance.md).
"""

from __future__ import annotations

import torch

from .fused import limits, op  # noqa: F401  (op: registers torch.ops.tisa_hf.toeplitz_attention)
from .route import NO_KERNELS, SdpaCall, SdpaRoute


class FusedRoute(SdpaRoute):
    name = "fused TISA kernel"

    def refusal(self, call: SdpaCall) -> str | None:
        query, key, value = call.query, call.key, call.value
        if call.kernels is None:
            return NO_KERNELS
        if call.in_decoder:
            return "a decoder's self-attention is causal, and the Triton kernels have no causal mask"
        if not limits.TRITON_FOUND:
            return "Triton is not installed"
        if not (query.device.type == "cuda" or (query.device.type == "cpu" and limits.TRITON_INTERPRETED)):
            return f"the query is on {query.device.type}: the Triton kernels run on CUDA (on the CPU interpreted only)"
        if query.dtype not in limits.DTYPES:
            return f"the query is {query.dtype}, which the Triton kernels do not take"
        if query.dtype == torch.bfloat16 and not takes_bf16(query.device):
            return f"bfloat16 needs compute capability {limits.BF16_FROM[0]}.{limits.BF16_FROM[1]} (and a GPU)"
        if call.bias_dtype != query.dtype:
            return f"the bias is {call.bias_dtype} (autocast) and the query {query.dtype}"
        if not (query.shape == key.shape == value.shape and query.dtype == key.dtype == value.dtype):
            return "query, key and value differ in shape or dtype (grouped heads, a KV cache)"
        if query.shape[-1] > limits.MAX_HEAD_DIM:
            return f"heads of {query.shape[-1]} exceed the Triton kernels' {limits.MAX_HEAD_DIM}"
        if call.length > limits.MAX_LENGTH:
            return f"{call.tokens} exceed the dropout counter's {limits.MAX_LENGTH} tokens"
        unsupported = call.packed_refusal() or call.unsupported_arguments_refusal()
        if unsupported is not None:
            return unsupported
        if not is_boolean_mask(call.mask, query):
            return "the padding mask is not boolean (transformers' sdpa mask) or does not broadcast to (B, H, n, n)"
        return None

    def run(self, call: SdpaCall) -> tuple[torch.Tensor, None]:
        query = call.query
        table = call.kernels.offset_table(call.layer, call.length, call.bias_dtype)
        scale = call.scaling if call.scaling is not None else query.shape[-1] ** -0.5
        seed = torch.randint(2**62, (1,), device=query.device) if call.dropout else None
        output, _ = torch.ops.tisa_hf.toeplitz_attention(
            query, call.key, call.value, table, expanded_mask(call.mask, query), seed, scale, float(call.dropout)
        )
        return output.transpose(1, 2), None

    def describe(self, call: SdpaCall) -> str:
        return f"{self.name} (Triton{', interpreted' if call.query.device.type == 'cpu' else ''})"


def takes_bf16(device: torch.device) -> bool:
    """Whether Triton's dot products take bf16 on `device`: from compute capability 8.0 on CUDA (Turing has no bf16
    tensor cores); the interpreter's bf16 dot products are wrong (tests/test_fused_kernel.py), so not on the CPU."""
    return device.type == "cuda" and torch.cuda.get_device_capability(device) >= limits.BF16_FROM


def is_boolean_mask(mask: torch.Tensor | None, query: torch.Tensor) -> bool:
    """Whether the Triton kernels read `mask` as it is: none, or a boolean mask that broadcasts to (B, H, n, n)."""
    if mask is None:
        return True
    return (
        mask.dtype == torch.bool
        and mask.dim() == 4
        and torch.broadcast_shapes(mask.shape, query.shape[:3] + (query.shape[2],))
        == query.shape[:3] + (query.shape[2],)
    )


def expanded_mask(mask: torch.Tensor | None, query: torch.Tensor) -> torch.Tensor | None:
    """`mask` as a (B, H, n, n) view (stride 0 along what it broadcasts over), as the Triton kernels read it."""
    if mask is None:
        return None
    batch, heads, length, _ = query.shape
    return mask.expand(batch, heads, length, length)
