"""TISA's fused attention: one Triton kernel pair that reads the bias from a layer's (H, 2n-1) offset table inside its
tiles and reduces the table's gradient inside its backward, so nothing of (B, H, n, n) is stored.

By role: `op.py` (the `torch.library` operators, registered when `tisa_hf.attention` is imported, with their fake
and autograd registrations), `forward.py` and `backward.py` (the Triton kernels and their launchers), `tiles.py`
(what both share: a tile's logits, the dropout's keep decision, tile sizes) and `limits.py` (what the kernels take,
read by the route without importing Triton). Triton is imported only here, when an operator first runs; the route
that calls the operator is `attention/fused_route.py`, beside the other routes.
"""
