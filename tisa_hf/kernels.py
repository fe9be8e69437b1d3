"""The TISA scoring functions and the Toeplitz attention bias they produce.

`f(k) = sum_s a_s * exp(-|b_s| * (k - c_s)^2)` for each layer and head (with the optional far-field term,
`- r * log(1 + |k|)`); the bias added to the attention logits is `F[h, i, j] = f_h(j - i)`. The "kernels" of
this package are these Gaussians (a_s, b_s, c_s); PyTorch's compute kernels go by their own names (its fused
attention kernels, memory-efficient or flash; GPU kernel launches).
"""

from __future__ import annotations

import math

import torch
from torch import nn

# The kernel module's parameter names, as its state-dict keys end.
KERNEL_PARAMETERS = ("amplitude", "sharpness", "center", "far_field_slope")


def kernel_values(
    amplitude: torch.Tensor, sharpness: torch.Tensor, center: torch.Tensor, offsets: torch.Tensor
) -> torch.Tensor:
    """f(k) for kernels of shape (..., S) at `offsets` of shape (K,): returns (..., K)."""
    distance = offsets[:, None] - center[..., None, :]
    return (amplitude[..., None, :] * torch.exp(-sharpness.abs()[..., None, :] * distance.square())).sum(-1)


def far_field_values(slope: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """-r·log(1 + |k|) for slopes of shape (...) at `offsets` (K,): returns (..., K). Logarithmic, as KERPLE-log:
    it keeps telling distances apart at thousands of tokens, where a linear (ALiBi) slope learnt on 512 tokens
    would mask everything far away."""
    return -slope[..., None] * torch.log1p(offsets.abs())


def nonzero_band(values: torch.Tensor) -> tuple[int, int] | None:
    """The first and last offset k at which some head's f(k) is not exactly 0, from a layer's (heads, 2n-1) offset
    values f(-(n-1)) .. f(n-1); None where every value is 0."""
    nonzero = torch.nonzero(values.any(0)).flatten()
    if len(nonzero) == 0:
        return None
    centre = (values.shape[-1] - 1) // 2
    return int(nonzero[0]) - centre, int(nonzero[-1]) - centre


def toeplitz_from_offsets(values: torch.Tensor, length: int) -> torch.Tensor:
    """Builds F[..., i, j] = values[..., j - i + length - 1] from the 2n-1 values f(-(n-1)) .. f(n-1).

    Eagerly, one strided view and one copy: row r of `unfold` holds values[r : r + n], i.e. offsets r - n + 1 .. r,
    and flipping the rows puts offset j - i at (i, j). Inside a compiled graph, an index: `unfold` and its backward
    fix the length there (one graph per length under `dynamic=True`), an index keeps it symbolic.
    """
    if torch.compiler.is_compiling():
        positions = torch.arange(length, device=values.device)
        return values[..., positions[None, :] - positions[:, None] + (length - 1)]
    return values.unfold(-1, length, 1).flip(-2)


class TisaPositionBias(nn.Module):
    """Kernel parameters a (`amplitude`), b (`sharpness`) and c (`center`), each (layers, heads, kernels), and,
    with `far_field="log"`, the far-field slopes r (`far_field_slope`, (layers, heads), starting at 0).

    Whenever no gradient is needed (`torch.no_grad`, inference mode) and the call is not being compiled
    (`torch.compile`), each layer's bias is cached for the last
    length, dtype and device it was built for, and rebuilt once the parameters change (an optimizer step,
    `load_state_dict`, `.to`), as long as all layers' biases together fit in `cache_limit_bytes`; longer
    inputs build the bias on every call instead.

    Between `begin_forward` and `end_forward` (the encoder's forward, `attaching.OffsetTablesPerForward`) the
    layers' offset tables come from one evaluation of every layer's kernels (`layer_tables`), made when the first
    layer asks: a handful of operator calls (and GPU kernel launches) for the whole model instead of about twenty a
    layer, and one backward through the kernels. The values are bit for bit those of one layer's evaluation:
    every operation in `kernel_values` is elementwise or reduces over the kernels or offsets of one layer and head,
    in the same order whatever the number of layers (`tests/test_fast_paths.py`).
    """

    cache_limit_bytes: int = 256 * 2**20

    def __init__(self, num_layers: int, num_heads: int, num_kernels: int, far_field: str = "none"):
        super().__init__()
        shape = (num_layers, num_heads, num_kernels)
        self.amplitude = nn.Parameter(torch.zeros(shape))
        self.sharpness = nn.Parameter(torch.zeros(shape))
        self.center = nn.Parameter(torch.zeros(shape))
        self.far_field_slope = nn.Parameter(torch.zeros(shape[:2])) if far_field == "log" else None
        self.enabled = True
        self._cache: dict[int, tuple[tuple, torch.Tensor]] = {}
        self._forward_tables: dict[tuple, tuple[torch.Tensor, ...]] | None = None
        self._forward_bands: dict[tuple, tuple[int, int] | None] = {}

    @property
    def num_layers(self) -> int:
        return self.amplitude.shape[0]

    @property
    def num_heads(self) -> int:
        return self.amplitude.shape[1]

    @property
    def num_kernels(self) -> int:
        return self.amplitude.shape[2]

    def extra_repr(self) -> str:
        far_field = ", far_field=log" if self.far_field_slope is not None else ""
        return f"layers={self.num_layers}, heads={self.num_heads}, kernels={self.num_kernels}{far_field}"

    def scoring_function(self, offsets: torch.Tensor, layer: int | None = None) -> torch.Tensor:
        """f(k) at `offsets`: (layers, heads, K), or (heads, K) for one layer."""
        params = (self.amplitude, self.sharpness, self.center)
        slope = self.far_field_slope
        if layer is not None:
            row = self._parameter_row(layer)
            params = tuple(p[row] for p in params)
            slope = slope[row] if slope is not None else None
        offsets = offsets.to(self.amplitude.dtype)
        values = kernel_values(*params, offsets)
        if slope is not None:
            values = values + far_field_values(slope, offsets)
        return values

    def needs_grad(self) -> bool:
        """Whether a bias built now would carry a gradient to the kernel parameters."""
        return torch.is_grad_enabled() and any(p.requires_grad for p in self.parameters())

    def fits_cache(self, length: int, dtype: torch.dtype) -> bool:
        """Whether every layer's bias at `length` and `dtype` fits in `cache_limit_bytes` together."""
        return self.num_layers * self.num_heads * length * length * dtype.itemsize <= self.cache_limit_bytes

    def offset_table(self, layer: int, length: int, dtype: torch.dtype) -> torch.Tensor:
        """f(-(n-1)) .. f(n-1) of one layer's heads: (heads, 2n-1), in `dtype`; inside an eager forward, a view of
        the tables all layers share (a compiled graph evaluates each layer's row itself: the compiler fuses it, and
        the shared tables are keyed on grad modes it cannot trace)."""
        if self._forward_tables is None or torch.compiler.is_compiling():
            return self._evaluate(length, dtype, layer)
        key = (length, dtype, torch.is_grad_enabled(), torch.is_inference_mode_enabled())
        tables = self._forward_tables.get(key)
        if tables is None:
            tables = self._forward_tables[key] = self.layer_tables(length, dtype)
        return tables[self._parameter_row(layer)]

    def nonzero_band(self, layer: int, length: int, dtype: torch.dtype) -> tuple[int, int] | None:
        """`nonzero_band` of the layer's `offset_table`: the offsets where its f is not exactly 0 at this length and
        dtype; inside a forward, read once a layer."""
        values = self.offset_table(layer, length, dtype)
        if self._forward_tables is None:
            return nonzero_band(values)
        key = (length, dtype, torch.is_grad_enabled(), torch.is_inference_mode_enabled(), self._parameter_row(layer))
        if key not in self._forward_bands:
            self._forward_bands[key] = nonzero_band(values)
        return self._forward_bands[key]

    def layer_tables(self, length: int, dtype: torch.dtype) -> tuple[torch.Tensor, ...]:
        """Every parameter row's (heads, 2n-1) offset table from one evaluation, one view a row (a single row
        where the layers share their kernels)."""
        return self._evaluate(length, dtype).unbind(0)

    def begin_forward(self) -> None:
        """From now until `end_forward`, layers share one evaluation of the kernels per length, dtype and grad mode."""
        self._forward_tables = {}
        self._forward_bands = {}

    def end_forward(self) -> None:
        """Back to one evaluation a layer (a call outside the encoder's forward, such as a checkpoint's recompute,
        must not reuse a table whose graph a backward may have freed)."""
        self._forward_tables = None
        self._forward_bands = {}

    def _evaluate(self, length: int, dtype: torch.dtype, layer: int | None = None) -> torch.Tensor:
        offsets = torch.arange(1 - length, length, device=self.amplitude.device)
        return self.scoring_function(offsets, layer).to(dtype)

    def forward(self, layer: int, length: int, dtype: torch.dtype) -> torch.Tensor:
        """The (1, heads, length, length) bias of one layer, in `dtype`. Built afresh inside a compiled graph, where
        it is a few fused operations and the cache's key (parameter versions, grad modes) cannot be traced."""
        if self.needs_grad() or not self.fits_cache(length, dtype) or torch.compiler.is_compiling():
            return self._build(layer, length, dtype)
        key = (
            length,
            dtype,
            self.amplitude.device,
            torch.is_inference_mode_enabled(),
            *self._parameter_versions(),
        )
        hit = self._cache.get(layer)
        if hit is not None and hit[0] == key:
            return hit[1]
        bias = self._build(layer, length, dtype)
        self._cache[layer] = (key, bias)
        return bias

    def rows(self, layer: int, query_length: int, key_length: int, dtype: torch.dtype) -> torch.Tensor:
        """The (1, heads, query_length, key_length) bias of queries at the last `query_length` of `key_length`
        positions (a step on a KV cache): rows key_length - query_length .. key_length - 1 of the layer's bias at
        `key_length`, built without the rows above them. A square call is `forward` itself."""
        if query_length == key_length:
            return self(layer, key_length, dtype)
        bias = toeplitz_from_offsets(self.offset_table(layer, key_length, dtype), key_length)
        return bias[..., key_length - query_length :, :].unsqueeze(0)

    def _build(self, layer: int, length: int, dtype: torch.dtype) -> torch.Tensor:
        return toeplitz_from_offsets(self.offset_table(layer, length, dtype), length).unsqueeze(0)

    def _parameter_row(self, layer: int) -> int:
        return 0 if self.num_layers == 1 else layer

    def _parameter_versions(self) -> tuple:
        return tuple((p.data_ptr(), p._version) for p in self.parameters())

    @torch.no_grad()
    def reset_far_field(self) -> None:
        """r = 0: the far-field term starts switched off, whatever the kernels' initialisation."""
        if self.far_field_slope is not None:
            self.far_field_slope.zero_()

    @torch.no_grad()
    def reset_zeros(self, window: int) -> None:
        """f = 0, with centres spread over [-window, window] and widths to match, so learning can start."""
        self.amplitude.zero_()
        self._spread_centres(window)

    @torch.no_grad()
    def reset_random(self, window: int, generator: torch.Generator | None = None) -> None:
        """Random amplitudes (std 0.5), centres uniform in [-window, window], widths log-uniform."""
        shape = self.amplitude.shape
        self.amplitude.copy_(0.5 * torch.randn(shape, generator=generator))
        self.center.copy_((2 * torch.rand(shape, generator=generator) - 1) * window)
        log_width = torch.rand(shape, generator=generator) * math.log(max(window, 2))
        self.sharpness.copy_(1.0 / torch.exp(log_width).square())

    def _spread_centres(self, window: int) -> None:
        num_kernels = self.num_kernels
        if num_kernels == 0:
            return
        centres = torch.linspace(-window, window, num_kernels) if num_kernels > 1 else torch.zeros(1)
        width = max(2 * window / max(num_kernels, 1), 1.0)
        self.center.copy_(centres.expand_as(self.center))
        self.sharpness.fill_(1.0 / width**2)
