"""The one place where TISA's bias enters the attention logits: attention functions of TISA's own, and the routes
`tisa_sdpa` takes.

- `functions.py`: the `tisa_eager`, `tisa_sdpa` and `tisa_flex_attention` functions transformers calls, and their
  registration; `sites.py` finds a module's layer and kernels, `length_scale.py` scales long queries,
  `logits.py` merges the bias with the padding mask.
- `tisa_sdpa`'s routes, one module each, tried in the order of `policy.py`: `stored_bias.py` (transformers' sdpa, plain
  or with the bias stored in the mask), `banded_route.py` (its computation in the folder `banded/`: `sdpa.py`,
  `padded.py` for padded batches, `log_sum_exp.py`, and its operator, `op.py`) and `blockwise.py` (long inputs without
  the (H, n, n) bias), `trainable_bias.py` (the CPU's flash attention kernel with a bias that trains), `traced.py` (a
  traced call's bias that trains, in plain operators), `fused_route.py` (TISA's own Triton kernel pair, opt-in, in the
  folder `fused/`: its operators, Triton kernels and limits). A route is an object that says why it does not run a call
  (`refusal`, or None: it applies), runs it and describes itself (`route.py`, with the SDPA backend PyTorch picks); a
  new route is a module and its place in the policy.
- `flex.py`: flex attention with the offset table in its score modification, and the calls it refuses.
"""

from .functions import ATTENTION_FUNCTIONS, register_attention_functions
from .policy import (
    BANDED,
    BLOCKWISE,
    DEFAULT_SDPA_POLICY,
    FUSED,
    FUSED_SDPA_POLICY,
    PLAIN,
    SDPA_POLICY_KWARG,
    STORED_BIAS,
    TRACED_SDPA_POLICY,
    TRACED_TRAINABLE_BIAS,
    TRAINABLE_BIAS,
    SdpaPolicy,
    is_tracing,
    sdpa_route,
)
from .route import SdpaCall, SdpaRoute

__all__ = [
    "ATTENTION_FUNCTIONS",
    "BANDED",
    "BLOCKWISE",
    "DEFAULT_SDPA_POLICY",
    "FUSED",
    "FUSED_SDPA_POLICY",
    "PLAIN",
    "SDPA_POLICY_KWARG",
    "STORED_BIAS",
    "TRACED_SDPA_POLICY",
    "TRACED_TRAINABLE_BIAS",
    "TRAINABLE_BIAS",
    "SdpaCall",
    "SdpaPolicy",
    "SdpaRoute",
    "is_tracing",
    "register_attention_functions",
    "sdpa_route",
]
