"""cudal2_ops: tuned fp16/bf16 GEMM for NVIDIA GPUs with torch semantics.

    import cudal2_ops
    y = cudal2_ops.matmul(a, b)            # torch.matmul semantics, b [K, N]
    y = cudal2_ops.linear(x, w, bias)      # F.linear semantics, w [N, K]
    cudal2_ops.patch_linear(model)         # route a model's nn.Linear layers through cudal2_ops.linear
    cudal2_ops.explain(a, b)               # which kernel or cuBLASLt algorithm runs, and why

    with cudal2_ops.record_problems("p.json"): model(x)   # then: python -m cudal2_ops.tune --problems p.json

Per-GPU tables hold a measured choice per problem (a tuned kernel where it beat cuBLASLt, else the fastest cuBLASLt
configuration); problems they do not list run cuBLASLt's heuristic (autotuned with CUDAL2_TUNE=1); non-CUDA /
non-half inputs run torch itself.
"""
from __future__ import annotations

import atexit

from cudal2_ops import _extension
from cudal2_ops.ops import explain, is_available, is_compiled, linear, matmul
from cudal2_ops.record import record_problems
from cudal2_ops.patch import (CudaL2Linear, PatchSummary, is_linear_patched, patch_linear, patched_linear,
                              swap_linear, unpatch_linear, unswap_linear)

__version__ = "0.1.0"
__all__ = ["matmul", "linear", "explain", "record_problems", "is_available", "is_compiled", "patch_linear", "unpatch_linear",
           "patched_linear", "is_linear_patched", "swap_linear", "unswap_linear", "CudaL2Linear", "PatchSummary",
           "__version__"]


def _save_tuning_at_exit() -> None:
    from cudal2_ops import tuning_cache

    tuning_cache.save_from_dispatcher()


if _extension._C is not None and _extension.env_flag("CUDAL2_TUNE"):
    atexit.register(_save_tuning_at_exit)
