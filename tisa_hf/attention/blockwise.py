"""The blockwise route: long inputs without gradients run SDPA over blocks of query rows, each block's rows of the
bias cut from the layer's (H, 2n-1) offset table (`ToeplitzBias`), so the (H, n, n) bias is never stored."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import torch

from . import logits
from .route import NO_KERNELS, SdpaCall, SdpaRoute, sdpa_backend, stand_in_bias

# The query blocks: on the CPU, as many rows as keep a block's bias within BLOCK_BIAS_BYTES (it stays in cache). A GPU's
# SDPA kernel (flash, memory-efficient) runs one program per head and tile of query rows, so blocks of a few dozen rows
# leave most of its multiprocessors idle: there a block holds at least ACCELERATOR_BLOCK_ROWS rows (1.5 GiB of bias for
# 12 heads at 32,768 tokens).
BLOCK_BIAS_BYTES = 64 * 2**20
ACCELERATOR_BLOCK_ROWS = 1024


class BlockwiseRoute(SdpaRoute):
    name = "blockwise SDPA"

    def refusal(self, call: SdpaCall) -> str | None:
        if call.kernels is None:
            return NO_KERNELS
        if not call.is_square:
            return "fewer queries than keys (a step on a KV cache)"
        return call.packed_refusal() or call.long_inference_refusal()

    def run(self, call: SdpaCall) -> tuple[torch.Tensor, None]:
        bias = ToeplitzBias(call.kernels.offset_table(call.layer, call.length, call.bias_dtype), call.length)
        output = blockwise_biased_sdpa(
            call.query, call.key, call.value, call.mask, bias, call.dropout, call.scaling, call.masks_causally_itself()
        )
        return output.transpose(1, 2).contiguous(), None

    def describe(self, call: SdpaCall) -> str:
        row_bytes = call.query.shape[0] * call.query.shape[1] * call.length * call.bias_dtype.itemsize
        rows = blockwise_rows(call.length, row_bytes, call.query.device)
        backend = sdpa_backend(call.query[:, :, :rows], call.key, stand_in_bias(call, rows), call.dropout)
        return f"{self.name} ({backend})"


@dataclass(frozen=True)
class ToeplitzBias:
    """A layer's bias F[h, i, j] = table[h, j - i + n - 1], kept as its (heads, 2n-1) offset table."""

    table: torch.Tensor
    length: int

    def row_blocks(self, block: int) -> Iterator[tuple[int, int, torch.Tensor]]:
        """(start, stop, rows start .. stop-1 of the bias as a (1, heads, stop - start, n) view) for consecutive
        blocks of `block` rows.

        The rows of block b are those of block 0 shifted b * block columns to the right, so every block is a column
        window of one contiguous band F'[p, m] = f(m - (blocks - 1) * block - p) of `block` rows, built once: a
        row-major mask, on which the CPU's flash attention kernel runs at full speed, where a copy per block (a flip of
        an overlapping view) comes out column-major (docs/performance.md). Offsets below -(n-1) occur only in band
        entries no block reads (zero padding)."""
        length, blocks = self.length, -(-self.length // block)
        padding = blocks * block - length
        padded = torch.nn.functional.pad(self.table, (padding, 0))
        width = length + (blocks - 1) * block
        band = padded.unfold(-1, width, 1).flip(-2).contiguous().unsqueeze(0)
        for index, start in enumerate(range(0, length, block)):
            stop = min(start + block, length)
            shift = (blocks - 1 - index) * block
            yield start, stop, band[:, :, : stop - start, shift : shift + length]


def blockwise_rows(length: int, row_bytes: int, device: torch.device) -> int:
    """Query rows per block of the blockwise route, for rows of `row_bytes` bytes of bias on `device`."""
    rows = BLOCK_BIAS_BYTES // row_bytes
    if device.type != "cpu":
        rows = max(rows, ACCELERATOR_BLOCK_ROWS)
    return max(1, min(length, rows))


def blockwise_biased_sdpa(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    bias: ToeplitzBias,
    dropout: float,
    scale: float | None,
    causal: bool = False,
) -> torch.Tensor:
    """SDPA over blocks of query rows, each with its own rows of `bias` merged into `mask` (and causally masked where
    `causal`): (B, H, n, d)."""
    batch, heads, length = query.shape[0], query.shape[1], query.shape[2]
    row_bytes = batch * heads * key.shape[2] * bias.table.element_size()
    outputs = []
    for start, stop, rows in bias.row_blocks(blockwise_rows(length, row_bytes, query.device)):
        block_mask = mask[..., start:stop, :] if mask is not None and mask.shape[-2] > 1 else mask
        if causal:
            rows = logits.causally_masked(rows, start)
        block_bias = logits.merge_bias(block_mask, rows)
        if block_bias.device.type != "cpu":
            # The CPU's flash attention kernel reads a block's window into the band in place. CUDA's memory-efficient
            # attention kernel reads masks in 16-byte vectors, which most windows do not start on ("misaligned
            # address"): it gets a fresh contiguous copy (docs/performance.md).
            block_bias = block_bias.contiguous()
        outputs.append(
            torch.nn.functional.scaled_dot_product_attention(
                query[:, :, start:stop],
                key,
                value,
                attn_mask=block_bias,
                dropout_p=dropout,
                scale=scale,
            )
        )
    return torch.cat(outputs, dim=2)
