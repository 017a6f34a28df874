"""The public GEMM API: `matmul`, `linear`, `explain`, and the fake (meta) kernels of the custom ops.

`torch.ops.cudal2.matmul/linear` are defined in C++ (csrc/bindings.cpp). Eager calls enter through `_C.matmul/linear`,
which dispatch the same ops from C++ (below autograd when no gradient is needed); traced calls use torch.ops, and the
code Inductor generates for them calls `_C.linear_out/matmul_out` (inductor_lowering.py). Without the compiled
extension every function runs torch.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from cudal2_ops import _extension, inductor_lowering
from cudal2_ops._extension import _C


def is_available() -> bool:
    """True when the compiled extension is loaded (otherwise every call runs torch)."""
    return _C is not None


def _traced() -> bool:
    """Whether the call must go through torch.ops (Dynamo tracing or an active TorchFunctionMode, which do not see
    the extension's direct entry points). Eager calls take `_C.matmul/linear`, which dispatch the same ops."""
    return torch.compiler.is_compiling() or torch._C._is_torch_function_mode_enabled()


def matmul(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """torch.matmul(a, b) through cudal2.

    a: [..., K]; b: [K, N] (a 2-D b takes the tuned path; other ranks run torch.matmul). float16 / bfloat16 CUDA
    tensors with a unit inner stride run a table kernel or cuBLASLt with fp32 accumulation on the current stream;
    anything else runs torch.matmul with identical semantics. Returns [..., N] (or writes `out`).
    """
    if _C is None:
        _extension.warn_fallback_once()
        return torch.matmul(a, b, out=out) if out is not None else torch.matmul(a, b)
    if out is not None:
        return torch.ops.cudal2.matmul.out(a, b, out=out) if _traced() else _C.matmul_out(a, b, out)
    if _traced():
        return torch.ops.cudal2.matmul.default(a, b)
    return _C.matmul(a, b)


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """torch.nn.functional.linear(x, weight, bias) through cudal2.

    x: [..., K]; weight: [N, K]; bias: [N] or None (fused into the GEMM epilogue). Returns [..., N]. Same dtype and
    device rules as `matmul`.
    """
    if _C is None:
        _extension.warn_fallback_once()
        return F.linear(x, weight, bias)
    if _traced():
        return torch.ops.cudal2.linear.default(x, weight, bias)
    return _C.linear(x, weight, bias)


def explain(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, *, layout: str = "nn") -> dict:
    """Which path `matmul(a, b)` (layout "nn", b [K, N]) or `linear(a, b, bias)` (layout "nt", b [N, K]) would take.

    Returns a dict with `path` ("kernel" | "cublaslt" | "torch"), `reason`, and the kernel name and knobs or the
    cuBLASLt choice. Runs no GPU work.
    """
    if layout not in ("nn", "nt"):
        raise ValueError(f"layout must be 'nn' (b is [K, N]) or 'nt' (b is [N, K]), got {layout!r}")
    if _C is None:
        return {"path": "torch", "reason": f"compiled extension not available ({_extension.IMPORT_ERROR})"}
    return _C.explain(a, b.t() if layout == "nt" else b, bias)


# ---- fake (meta) kernels: shapes and dtypes only, for torch.compile / FakeTensor tracing -------------------------
# Tracing is also when compiled code is about to be generated: the first fake call installs the Inductor lowerings.

def _fake_matmul(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    inductor_lowering.install()
    return torch.matmul(a, b)


def _fake_matmul_out(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor) -> torch.Tensor:
    return out


def _fake_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    inductor_lowering.install()
    return F.linear(x, weight, bias)


def _register() -> None:
    """Registers the fake kernels and the table loader of the C++-defined ops (autograd is in csrc/autograd.cpp)."""
    torch.library.register_fake("cudal2::matmul", _fake_matmul)
    torch.library.register_fake("cudal2::matmul.out", _fake_matmul_out)
    torch.library.register_fake("cudal2::linear", _fake_linear)
    from cudal2_ops import tables  # noqa: PLC0415 (imports torch.cuda helpers lazily)

    _C.set_table_loader(tables.install_table)


if _C is not None:
    _register()
