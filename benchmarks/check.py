"""Correctness gate of the benchmark: every output is compared with the fp32 reference of the project's
correctness harness (`cudal2_testing.correctness`) before it may be timed; tolerances are the harness's."""
from __future__ import annotations

import torch
from cudal2_testing.correctness import REL_TOL, error_stats, reference

DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
TOLERANCE = {name: REL_TOL[dt] for name, dt in DTYPES.items()}


def fp32_reference(a: torch.Tensor, b_kn: torch.Tensor) -> torch.Tensor:
    """The harness's fp32 reference (no TF32, no reduced-precision reductions) of a[M,K] @ b_kn[K,N]."""
    return reference(a, b_kn, "nn", None)


def verdict(out: torch.Tensor, ref: torch.Tensor, dtype: str) -> tuple[bool, float, str | None]:
    """(ok, relative Frobenius error, failure message or None) of one output against the reference; NaN or inf
    anywhere in the output is a failure."""
    if tuple(out.shape) != tuple(ref.shape):
        return False, float("nan"), f"output shape {tuple(out.shape)} != {tuple(ref.shape)}"
    err = error_stats(out, ref).rel_err
    if not err <= TOLERANCE[dtype]:
        return False, err, f"relative error {err:.3e} > {TOLERANCE[dtype]:.0e}"
    return True, err, None
