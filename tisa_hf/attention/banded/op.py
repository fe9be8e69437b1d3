"""The banded route as one PyTorch operator, `torch.ops.tisa_hf.banded_sdpa`, with its fake implementation."""

from __future__ import annotations

import torch

from ...kernels import nonzero_band
from ..blockwise import ToeplitzBias, blockwise_biased_sdpa
from .sdpa import band_fits, banded_biased_sdpa


@torch.library.custom_op("tisa_hf::banded_sdpa", mutates_args=())
def banded_sdpa(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    table: torch.Tensor,
    scale: float | None,
) -> torch.Tensor:
    """The banded route as one operator, (B, H, n, d): `banded_biased_sdpa` where the layer's band allows
    (`band_fits`), else blockwise (as where the padded-batch correction would lose precision).

    An operator, so that `torch.compile` keeps the route whole: it reads the band from the offset table at run
    time, which a compiled graph cannot branch on, and inside a compiled model it runs exactly as it does eagerly.
    Inference only (the route is taken without gradients), so it has no backward."""
    band = nonzero_band(table)
    if band_fits(band, query.shape[2]):
        output = banded_biased_sdpa(query, key, value, mask, table, scale, band)
        if output is not None:
            return output.contiguous()
    return blockwise_biased_sdpa(query, key, value, mask, ToeplitzBias(table, query.shape[2]), 0.0, scale)


@banded_sdpa.register_fake
def _(query, key, value, mask, table, scale):
    return query.new_empty(*query.shape[:-1], value.shape[-1])
