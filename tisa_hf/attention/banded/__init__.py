"""The banded route's computation: `sdpa.py` (`banded_biased_sdpa`: a bias that is 0 outside a band, without the
(H, n, n) bias), `padded.py` (its padded-batch correction), `log_sum_exp.py` (PyTorch's SDPA kernels that return the
log-sum-exp, called directly, and the merge by it) and `op.py` (the `torch.library` operator the route calls, as the
fused route's is in `fused/op.py`). The route itself is `attention/banded_route.py`, beside the other routes."""
