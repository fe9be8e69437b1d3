"""Which route a `tisa_sdpa` call takes: the first of an ordered list of routes that applies to it.

The default order: transformers' sdpa where the layer has no TISA kernels; for long inputs without gradients, banded
where the layer's band allows, else blockwise; the CPU trainable-bias route where only a float bias requiring a gradient
would push PyTorch off its flash attention kernel; SDPA with the stored bias for everything else. A traced call
(`torch.export`, `torch.onnx.export`, `torch.jit.trace`) takes the traced policy instead. A model call may pass another
policy for every layer as `tisa_sdpa_policy=...` (`tisa-hf bench` times the long-input routes side by side so).

The fused route (`fused_route.py`, a Triton kernel pair) comes right after the plain route in `FUSED_SDPA_POLICY`. A
model takes it where its `TisaConfig.sdpa_policy` is "fused"; models that name no policy take `DEFAULT_SDPA_POLICY`,
the fused one only where the environment variable `TISA_HF_FUSED_ATTENTION=1` is set when `tisa_hf` is imported, until
GPU measurements show where it is faster (docs/performance.md, "When the fused route becomes the default")."""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch

from ..config import SDPA_POLICIES
from ..kernels import TisaPositionBias
from .banded_route import BandedRoute
from .blockwise import BlockwiseRoute
from .fused_route import FusedRoute
from .route import SdpaCall, SdpaRoute
from .stored_bias import PlainRoute, StoredBiasRoute
from .traced import TracedTrainableBiasRoute
from .trainable_bias import TrainableBiasRoute

PLAIN, BANDED, BLOCKWISE = PlainRoute(), BandedRoute(), BlockwiseRoute()
TRAINABLE_BIAS, STORED_BIAS = TrainableBiasRoute(), StoredBiasRoute()
FUSED = FusedRoute()
TRACED_TRAINABLE_BIAS = TracedTrainableBiasRoute()
# The keyword argument of a model call that carries its policy down to every attention call.
SDPA_POLICY_KWARG = "tisa_sdpa_policy"


@dataclass(frozen=True)
class SdpaPolicy:
    """Routes in the order they are tried; the last must apply to every call."""

    routes: tuple[SdpaRoute, ...]

    def choose(self, call: SdpaCall) -> SdpaRoute:
        """The first route that applies."""
        for route in self.routes:
            if route.applies(call):
                return route
        raise ValueError(f"no route of {self.routes} applies to this call")

    def without(self, route: SdpaRoute) -> SdpaPolicy:
        """This policy with `route` left out (its calls go on to the next route that applies)."""
        return SdpaPolicy(tuple(kept for kept in self.routes if kept is not route))


STANDARD_SDPA_POLICY = SdpaPolicy((PLAIN, BANDED, BLOCKWISE, TRAINABLE_BIAS, STORED_BIAS))
FUSED_SDPA_POLICY = SdpaPolicy((PLAIN, FUSED, *STANDARD_SDPA_POLICY.routes[1:]))
# `TisaConfig.sdpa_policy`'s names, in the order `config.SDPA_POLICIES` lists them.
NAMED_SDPA_POLICIES = dict(zip(SDPA_POLICIES, (STANDARD_SDPA_POLICY, FUSED_SDPA_POLICY), strict=True))
# The environment variable that makes the fused policy the default of models that name none ("1"; read once, at
# import).
FUSED_OPT_IN = "TISA_HF_FUSED_ATTENTION"
# How a model takes the fused policy, as `tisa-hf env` says it.
FUSED_OPT_IN_HOW = f"TisaConfig(sdpa_policy='fused') for one model, {FUSED_OPT_IN}=1 for every model that names none"
DEFAULT_SDPA_POLICY = FUSED_SDPA_POLICY if os.environ.get(FUSED_OPT_IN) == "1" else STANDARD_SDPA_POLICY
# A traced program must run on every device and exporter, and at every length its dynamic shapes allow: a bias that
# trains in plain operators (`traced.py`), any other stored in PyTorch's own `scaled_dot_product_attention`, which each
# device and ONNX lower themselves. The other routes call one device's SDPA kernel by name (trainable-bias, banded:
# `_scaled_dot_product_flash_attention_for_cpu`, which has no gradient for its mask, so that the program fails when
# called with grad mode on) or choose by the example's length (banded, blockwise), which the program would keep.
TRACED_SDPA_POLICY = SdpaPolicy((PLAIN, TRACED_TRAINABLE_BIAS, STORED_BIAS))


def is_tracing() -> bool:
    """Whether this call is being traced into a program run elsewhere: `torch.export` (and `torch.onnx.export`'s
    `dynamo=True`, built on it), or TorchScript's tracer (the older `torch.onnx.export`). `torch.compile` is not:
    its graph runs in this process, on this device, and keeps the eager routes."""
    return torch.compiler.is_exporting() or torch.jit.is_tracing()


def call_policy(named: str | None = None) -> SdpaPolicy:
    """The policy of a call that passes none: the traced policy while tracing, else the model's named policy
    (`TisaConfig.sdpa_policy`), else the default."""
    if is_tracing():
        return TRACED_SDPA_POLICY
    return NAMED_SDPA_POLICIES[named] if named is not None else DEFAULT_SDPA_POLICY


def passed_over(policy: SdpaPolicy, call: SdpaCall) -> list[tuple[SdpaRoute, str]]:
    """Each route `policy` tries before the one it chooses for `call`, and why it did not apply, from its own
    `refusal`."""
    tried = policy.routes[: policy.routes.index(policy.choose(call))]
    return [(route, route.refusal(call)) for route in tried]


def sdpa_route(
    kernels: TisaPositionBias | None,
    query: torch.Tensor,
    key: torch.Tensor,
    dropout: float,
    kwargs: dict,
    layer: int | None = None,
    policy: SdpaPolicy | None = None,
) -> SdpaRoute:
    """The route a call of `layer` with this query and key takes (its autocast and grad modes included) under
    `policy` (None: the policy of a call that passes none), for a description of it (`tisa-hf env`); without a layer,
    the banded route (which reads the layer's kernels) is not considered."""
    call = SdpaCall(query, key, key, None, dropout, None, kernels, layer, kwargs=kwargs)
    return (policy or call_policy()).choose(call)
