"""The route of a traced call (`torch.export`, `torch.onnx.export`) whose bias carries a gradient to the kernels: the
attention in plain operators, with the bias in the logits.

PyTorch's `scaled_dot_product_attention` with a mask that requires a gradient runs its math path, whose decomposition
ONNX's exporter cannot trace at a dynamic length (`ConversionError: Failed to decompose the FX graph`); the same
computation written out exports, keeps the kernels' gradient in the program and runs on every device. A traced call
whose bias needs no gradient takes the stored bias (`stored_bias.py`), which keeps PyTorch's SDPA kernels in the
program."""

from __future__ import annotations

import torch

from . import logits
from .route import NO_KERNELS, SdpaCall, SdpaRoute


class TracedTrainableBiasRoute(SdpaRoute):
    name = "math attention + trainable bias (traced)"

    def refusal(self, call: SdpaCall) -> str | None:
        if call.kernels is None:
            return NO_KERNELS
        if not call.kernels.needs_grad():
            return "no gradient reaches the kernels: the stored bias keeps PyTorch's SDPA kernels in the program"
        return None

    def run(self, call: SdpaCall) -> tuple[torch.Tensor, None]:
        mask = call.biased_mask()
        training = call.module is not None and call.module.training
        output, _ = logits.math_attention(call.query, call.key, call.value, mask, call.scaling, call.dropout, training)
        return output, None

    def describe(self, call: SdpaCall) -> str:
        return self.name
