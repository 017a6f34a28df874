"""The fp32 reference, the tolerances of docs/EVALUATION.md and the default (torch) implementations to compare with.

An implementation is a callable `impl(a, b, bias, out) -> Tensor`: a is [M, K], b is [K, N] (layout "nn") or [N, K]
(layout "nt"), bias is [N] or None, out is a preallocated [M, N] tensor the impl may write in place; the return
value is the result.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F

Impl = Callable[[torch.Tensor, torch.Tensor, "torch.Tensor | None", torch.Tensor], torch.Tensor]

LAYOUTS = ("nn", "nt")
DTYPES = {"fp16": torch.float16, "bf16": torch.bfloat16}
# ||out - ref|| / ||ref|| bound per dtype (Frobenius norms).
REL_TOL = {torch.float16: 1e-3, torch.bfloat16: 8e-3}
# max|out - ref| <= MAX_ABS_FACTOR * max|baseline - ref| + MAX_ABS_SLACK
MAX_ABS_FACTOR = 2.0
MAX_ABS_SLACK = 1e-3


def default_device() -> torch.device:
    """The first CUDA device when there is one, else the CPU."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def dtype_name(dtype: torch.dtype) -> str:
    """"fp16" / "bf16" for a torch dtype."""
    return next(name for name, t in DTYPES.items() if t == dtype)


def problem_shape(a: torch.Tensor, b: torch.Tensor, layout: str) -> tuple[int, int, int]:
    """(M, N, K) of out = a @ op(b)."""
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    m, k = a.shape
    n = b.shape[1] if layout == "nn" else b.shape[0]
    return m, n, k


# (flag, value meaning full precision) of torch.backends.cuda.matmul. fp32_precision is torch >= 2.9's TF32 switch;
# older torch has only allow_tf32 (mixing the two raises in newer torch).
_STRICT_FLAGS = (("fp32_precision", "ieee") if hasattr(torch.backends.cuda.matmul, "fp32_precision")
                 else ("allow_tf32", False),
                 ("allow_fp16_reduced_precision_reduction", False), ("allow_bf16_reduced_precision_reduction", False))


@contextlib.contextmanager
def strict_cublas() -> Iterator[None]:
    """For the block: no TF32 in fp32 matmuls, and no reduced-precision (fp16/bf16) split-K reductions in cuBLAS,
    so fp32 means fp32 and half-precision GEMMs accumulate in fp32 throughout (torch allows both by default)."""
    matmul = torch.backends.cuda.matmul
    saved = {name: getattr(matmul, name) for name, _ in _STRICT_FLAGS}
    for name, value in _STRICT_FLAGS:
        setattr(matmul, name, value)
    try:
        yield
    finally:
        for name, value in saved.items():
            setattr(matmul, name, value)


def reference(a: torch.Tensor, b: torch.Tensor, layout: str, bias: torch.Tensor | None = None) -> torch.Tensor:
    """a @ op(b) (+ bias) computed in float32 without TF32, on the inputs' device; returns float32 [M, N]."""
    problem_shape(a, b, layout)
    bf = b.float() if layout == "nn" else b.float().t()
    with strict_cublas():
        ref = a.float() @ bf
    if bias is not None:
        ref += bias.float()
    return ref


@dataclass(frozen=True)
class ErrorStats:
    """How far a result is from the reference."""

    rel_err: float      # ||out - ref|| / ||ref|| (Frobenius; 0 when both are zero)
    max_abs_err: float  # max |out - ref| (inf when out holds a NaN or inf)

    def to_dict(self) -> dict[str, float]:
        return {"rel_err": self.rel_err, "max_abs_err": self.max_abs_err}


def error_stats(out: torch.Tensor, ref: torch.Tensor) -> ErrorStats:
    """Relative Frobenius error and max absolute error of out against the fp32 reference (one host sync)."""
    diff = out.float().reshape(ref.shape) - ref
    if diff.numel() == 0:
        return ErrorStats(0.0, 0.0)
    stats = torch.stack([torch.linalg.vector_norm(diff), torch.linalg.vector_norm(ref),
                         diff.abs().max()]).double().cpu().tolist()
    err_norm, ref_norm, max_abs = stats
    if not all(map(_finite, stats)):
        return ErrorStats(float("inf"), float("inf"))
    rel = err_norm / ref_norm if ref_norm > 0 else (0.0 if err_norm == 0 else float("inf"))
    return ErrorStats(rel, max_abs)


def _finite(x: float) -> bool:
    return x == x and abs(x) != float("inf")


def max_abs_bound(baseline: ErrorStats) -> float:
    """The max-abs-error an implementation may have given the baseline's on the same inputs."""
    return MAX_ABS_FACTOR * baseline.max_abs_err + MAX_ABS_SLACK


def within_tolerance(stats: ErrorStats, baseline: ErrorStats, dtype: torch.dtype) -> tuple[bool, str]:
    """Applies both accuracy criteria; returns (passed, human-readable detail)."""
    rel_ok = stats.rel_err <= REL_TOL[dtype]
    bound = max_abs_bound(baseline)
    abs_ok = stats.max_abs_err <= bound
    detail = (f"rel_err={stats.rel_err:.3g} (tol {REL_TOL[dtype]:g}), max_abs_err={stats.max_abs_err:.3g} "
              f"(bound {bound:.3g} from baseline {baseline.max_abs_err:.3g})")
    return rel_ok and abs_ok, detail


def torch_impl(layout: str) -> Impl:
    """The torch baseline: torch.matmul / torch.addmm (nn) or F.linear (nt) in the inputs' dtype, into out, with
    fp32 accumulation throughout (`strict_cublas`)."""
    if layout == "nn":
        def impl(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor) -> torch.Tensor:
            with strict_cublas():
                return torch.matmul(a, b, out=out) if bias is None else torch.addmm(bias, a, b, out=out)
    elif layout == "nt":
        def impl(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor) -> torch.Tensor:
            with strict_cublas():
                return out.copy_(F.linear(a, b, bias))
    else:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    impl.__name__ = f"torch_{layout}"
    return impl


def cublaslt_impl(layout: str) -> Impl:
    """docs/EVALUATION.md's accuracy yardstick: cuBLASLt with its top heuristic algorithm (fp32 accumulation,
    fp32-only split-K reductions) on fresh contiguous (16-byte aligned) copies of the inputs, into out."""
    from cudal2_ops._extension import _C  # noqa: PLC0415 (needs the compiled extension)

    def impl(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor) -> torch.Tensor:
        result = torch.empty(out.shape, dtype=out.dtype, device=out.device)
        fresh = [None if t is None else t.clone(memory_format=torch.contiguous_format) for t in (a, b, bias)]
        _C.testing.cublaslt_matmul(*fresh, result, layout, "heuristic")
        return out.copy_(result)

    impl.__name__ = f"cublaslt_{layout}"
    return impl


def baseline_impl(layout: str, device: torch.device | str) -> Impl:
    """The baseline whose max abs error bounds an implementation's: cuBLASLt on CUDA when the extension is built
    (as docs/EVALUATION.md defines it), else torch."""
    from cudal2_ops._extension import _C  # noqa: PLC0415

    if torch.device(device).type == "cuda" and _C is not None:
        return cublaslt_impl(layout)
    return torch_impl(layout)


def api_impl(layout: str) -> Impl:
    """The public cudal2 API: cudal2_ops.matmul (nn, no bias) or cudal2_ops.linear (nt)."""
    import cudal2_ops  # noqa: PLC0415 (the package imports this module; resolve the API at call time)

    if layout == "nn":
        def impl(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor) -> torch.Tensor:
            if bias is not None:
                raise ValueError("cudal2_ops.matmul takes no bias; use layout 'nt' (linear) for a fused bias")
            return cudal2_ops.matmul(a, b, out=out)
    elif layout == "nt":
        def impl(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None, out: torch.Tensor) -> torch.Tensor:
            return cudal2_ops.linear(a, b, bias)
    else:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    impl.__name__ = f"cudal2_{layout}"
    return impl
