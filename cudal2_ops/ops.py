"""The public GEMM API: `matmul`, `linear`, `explain`, and the fake (meta) kernels of the custom ops.

`torch.ops.cudal2.matmul/linear` are defined in C++ (csrc/bindings.cpp). Eager calls enter through `_C.matmul/linear`,
which run the op's kernel directly, or dispatch the op when autograd, a dispatch mode or a tensor subclass must see the
call (csrc/eager_entry.cpp); traced calls and tensors with `__torch_function__` use torch.ops, and the code Inductor
generates calls `_C.linear_out/matmul_out` (inductor_lowering.py). Without the compiled extension every function runs
torch. Every input torch accepts gives torch's result; every input it rejects raises torch's exception class.
"""
from __future__ import annotations

import torch
import torch.nn.functional as F

from cudal2_ops import _extension, inductor_lowering
from cudal2_ops._extension import _C


def is_compiled() -> bool:
    """True when the compiled extension `cudal2_ops._C` is loaded (without it every call runs torch)."""
    return _C is not None


def is_available() -> bool:
    """True when calls on CUDA fp16/bf16 tensors can take the tuned path: the compiled extension is loaded and torch
    sees a usable CUDA device. False on a machine without a GPU, where every call runs torch."""
    return _C is not None and torch.cuda.is_available()


_has_torch_function = torch._C._has_torch_function


def _through_torch_ops(*args: object) -> bool:
    """Whether the call must go through torch.ops: Dynamo tracing (the extension's entry points are opaque to it), an
    active TorchFunctionMode, or an argument with its own `__torch_function__` (one check covers both)."""
    return torch.compiler.is_compiling() or _has_torch_function(args)


def _raise_for_non_tensors(op: str, **args: object) -> None:
    """Raises TypeError naming the first argument that is not a tensor (None is allowed where the name is `bias` or
    `out`); returns when every argument is acceptable."""
    for name, value in args.items():
        if not isinstance(value, torch.Tensor) and not (value is None and name in ("bias", "out")):
            optional = " or None" if name in ("bias", "out") else ""
            raise TypeError(f"cudal2_ops.{op}: argument '{name}' must be a torch.Tensor{optional}, "
                            f"got {type(value).__name__}")


def matmul(a: torch.Tensor, b: torch.Tensor, *, out: torch.Tensor | None = None) -> torch.Tensor:
    """torch.matmul(a, b) through cudal2.

    a: [..., K]; b: [K, N] (a 2-D b takes the tuned path; other ranks run torch.matmul). float16 / bfloat16 CUDA
    tensors run a table kernel or cuBLASLt with fp32 accumulation on the current stream (operands whose strides or
    alignment the kernels cannot read are staged as aligned copies); anything else runs torch.matmul with identical
    semantics and errors. Returns [..., N] (or writes `out`, which torch's rules resize or reject).
    """
    if _C is None:
        _extension.warn_fallback_once()
        return torch.matmul(a, b, out=out) if out is not None else torch.matmul(a, b)
    if _through_torch_ops(a, b, out):
        if out is not None:
            return torch.ops.cudal2.matmul.out(a, b, out=out)
        return torch.ops.cudal2.matmul.default(a, b)
    try:
        return _C.matmul(a, b) if out is None else _C.matmul_out(a, b, out)
    except TypeError:
        _raise_for_non_tensors("matmul", a=a, b=b, out=out)
        raise


def linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """torch.nn.functional.linear(x, weight, bias) through cudal2.

    x: [..., K]; weight: [N, K]; bias: None or any bias F.linear accepts. A bias of x's dtype and device shaped [N],
    [1, N], [1] or 0-d is fused into the GEMM epilogue; other biases (e.g. [M, N]) run F.linear itself, whose
    broadcasting rules they follow. Returns [..., N]. Same dtype and device rules as `matmul`.
    """
    if _C is None:
        _extension.warn_fallback_once()
        return F.linear(x, weight, bias)
    if _through_torch_ops(x, weight, bias):
        return torch.ops.cudal2.linear.default(x, weight, bias)
    try:
        return _C.linear(x, weight, bias)
    except TypeError:
        _raise_for_non_tensors("linear", input=x, weight=weight, bias=bias)
        raise


def explain(a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, *, layout: str = "nn") -> dict:
    """Which path `matmul(a, b)` (layout "nn", b [K, N]) or `linear(a, b, bias)` (layout "nt", b [N, K]) would take.

    Returns a dict with `path` ("kernel" | "cublaslt" | "torch"), `reason`, and the kernel name and knobs or the
    cuBLASLt choice: `cublaslt_policy` ("table": the table's measured configuration; "tuned": from CUDAL2_TUNE or its
    file; "autotune": CUDAL2_TUNE on, not yet tuned; "heuristic") and `cublaslt_config` (its attributes). Validates the arguments as the call would (TypeError for a non-tensor, RuntimeError for operands
    torch rejects, on every device). Runs no GPU work.
    """
    _raise_for_non_tensors("explain", a=a, b=b, bias=bias)
    if layout not in ("nn", "nt"):
        raise ValueError(f"layout must be 'nn' (b is [K, N]) or 'nt' (b is [N, K]), got {layout!r}")
    if _C is None:
        return {"path": "torch", "reason": f"compiled extension not available ({_extension.IMPORT_ERROR})"}
    return _C.explain(a, b, bias, layout)


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
