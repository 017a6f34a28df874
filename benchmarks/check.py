"""Correctness gate of the benchmark: every output is compared with an fp32 reference before it may be timed."""
from __future__ import annotations

import torch

# Relative Frobenius error bound per dtype (docs/EVALUATION.md, correctness rule 1).
TOLERANCE = {"fp16": 1e-3, "bf16": 8e-3}


def _fp32_reference(a: torch.Tensor, b_kn: torch.Tensor) -> torch.Tensor:
    """a @ b in float32 with TF32 off (used until `cudal2_ops.correctness.reference` exists)."""
    saved = torch.backends.cuda.matmul.allow_tf32
    torch.backends.cuda.matmul.allow_tf32 = False
    try:
        return a.float() @ b_kn.float()
    finally:
        torch.backends.cuda.matmul.allow_tf32 = saved


def reference(a: torch.Tensor, b_kn: torch.Tensor) -> torch.Tensor:
    """The fp32 reference of a[M,K] @ b_kn[K,N]: the project's correctness harness when importable, else an
    fp32 matmul with TF32 off."""
    try:
        from cudal2_ops.correctness import reference as harness_reference
    except ImportError:
        return _fp32_reference(a, b_kn)
    return harness_reference(a, b_kn, "nn", None)


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    """||out - ref||_F / ||ref||_F in float32 (0 when both are zero)."""
    num = torch.linalg.vector_norm(out.float() - ref).item()
    den = torch.linalg.vector_norm(ref).item()
    return num / den if den > 0 else num


def verdict(out: torch.Tensor, ref: torch.Tensor, dtype: str) -> tuple[bool, float, str | None]:
    """(ok, relative error, failure message or None) of one output against the reference."""
    if tuple(out.shape) != tuple(ref.shape):
        return False, float("nan"), f"output shape {tuple(out.shape)} != {tuple(ref.shape)}"
    err = rel_error(out, ref)
    if not err <= TOLERANCE[dtype]:  # also catches NaN
        return False, err, f"relative error {err:.3e} > {TOLERANCE[dtype]:.0e}"
    return True, err, None
