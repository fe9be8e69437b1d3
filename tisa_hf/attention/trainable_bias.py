"""The CPU trainable-bias route: PyTorch leaves its CPU flash attention kernel for the unfused math path as soon as the
float mask requires a gradient, which TISA's bias does in training, and has no CPU attention kernel that returns a
mask gradient. `TrainableBiasAttention` runs the flash attention kernel forward with the bias as a constant mask and
recomputes the probabilities in its backward."""

from __future__ import annotations

import torch

from .route import LOG_SUM_EXP_DTYPES, NO_KERNELS, SdpaCall, SdpaRoute, sdpa_backend, stand_in_bias


class TrainableBiasRoute(SdpaRoute):
    name = "trainable-bias SDPA"

    def refusal(self, call: SdpaCall) -> str | None:
        if call.kernels is None:
            return NO_KERNELS
        return fused_bias_path_refusal(call) or call.unsupported_arguments_refusal()

    def run(self, call: SdpaCall) -> tuple[torch.Tensor, None]:
        mask = call.biased_mask()
        scale = call.scaling if call.scaling is not None else call.query.shape[-1] ** -0.5
        output = TrainableBiasAttention.apply(call.query, call.key, call.value, mask, scale)
        return output.transpose(1, 2).contiguous(), None

    def describe(self, call: SdpaCall) -> str:
        return f"{self.name} ({sdpa_backend(call.query, call.key, stand_in_bias(call).detach(), 0.0)} forward)"


def fused_bias_path_refusal(call: SdpaCall) -> str | None:
    """Why the call would not leave PyTorch's CPU flash attention kernel only because its float bias (merged with the
    4-D padding mask) requires a gradient, or None where it would."""
    query = call.query
    if not call.kernels.needs_grad():
        return "no gradient reaches the kernels: the bias is a constant mask PyTorch's own kernels take"
    if query.device.type != "cpu":
        return f"the query is on {query.device.type}: the route is for the CPU's flash attention kernel"
    if query.dtype not in LOG_SUM_EXP_DTYPES:
        return f"the query is {query.dtype}: the route runs in float32 only"
    if call.bias_dtype != query.dtype:
        return f"the bias is {call.bias_dtype} (autocast) and the query {query.dtype}"
    if query.shape[1] != call.key.shape[1]:
        return "the keys have fewer heads than the queries (grouped heads)"
    if call.dropout:
        return f"attention dropout {call.dropout}, which the hand-written backward does not redraw"
    return None


class TrainableBiasAttention(torch.autograd.Function):
    """softmax(q kᵀ · scale + bias) v through the CPU flash attention kernel, with a hand-written backward for the
    bias."""

    @staticmethod
    def forward(ctx, query, key, value, bias, scale):
        output, _ = torch.ops.aten._scaled_dot_product_flash_attention_for_cpu(
            query, key, value, attn_mask=bias, scale=scale
        )
        ctx.save_for_backward(query, key, value, bias, output)
        ctx.scale = scale
        return output

    @staticmethod
    def backward(ctx, grad_output):
        query, key, value, bias, output = ctx.saved_tensors
        scale = ctx.scale
        logits = torch.matmul(query, key.transpose(-1, -2)).mul_(scale).add_(bias)
        # softmax, not exp(logits - the forward's log-sum-exp): PyTorch's CPU exp leaves its vectorized path for
        # arguments below about -88, which every masked logit is (a sliding window, padding, a causal mask), and
        # took 10 times as long on ModernBERT's local layers; its softmax does not.
        probabilities = torch.softmax(logits, dim=-1)
        del logits
        grad_value = torch.matmul(probabilities.transpose(-1, -2), grad_output)
        row_dot = (grad_output * output).sum(-1, keepdim=True)
        grad_scores = torch.matmul(grad_output, value.transpose(-1, -2)).sub_(row_dot).mul_(probabilities)
        del probabilities
        grad_query = torch.matmul(grad_scores, key).mul_(scale)
        grad_key = torch.matmul(grad_scores.transpose(-1, -2), query).mul_(scale)
        grad_bias = None
        if ctx.needs_input_grad[3]:
            grad_bias = grad_scores if grad_scores.shape == bias.shape else grad_scores.sum_to_size(bias.shape)
        return grad_query, grad_key, grad_value, grad_bias, None
