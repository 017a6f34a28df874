"""Inductor lowerings of the cudal2 ops: compiled code calls the extension's out= entry points directly.

Without them Inductor keeps a custom op as a fallback kernel, and compiled code calls `torch.ops.cudal2.linear.default`
(a boxed call through the dispatcher, about 4 us more per call than the extension's direct entry on an H200 host:
`benchmarks/api_latency.py`), which costs a host-bound decode step compiled without CUDA graphs more than the faster
kernels save. With them, `cudal2::linear` and `cudal2::matmul` (2-D b) lower to extern kernels writing an output that
Inductor allocates, `extern_kernels.cudal2_linear(x, weight, out=buf)`, as Inductor calls `extern_kernels.mm` for
aten.mm; the entry points are the same C++ functions as the ops (same routing, kernels and fallbacks).

`install()` runs once per process, from the ops' fake kernels: torch.compile runs those while tracing a graph that
holds the ops, before Inductor lowers it. Inductor's lowering API is internal to torch: where it is missing or differs,
nothing is installed and compiled code keeps the fallback call (same results, the old host cost). The C++ wrapper
(`cpp_wrapper`, AOTInductor) and other operand ranks keep the fallback call too, as does every call in a process
started with CUDAL2_DISABLE_INDUCTOR_LOWERING=1 (measuring, debugging) -- for the graphs it compiles: Inductor's
on-disk cache may serve a graph compiled either way (set TORCHINDUCTOR_FORCE_DISABLE_CACHES=1 to compare the two).
"""
from __future__ import annotations

import warnings

import torch

from cudal2_ops._extension import _C, env_flag

_installed: bool | None = None  # None: not tried yet


def install() -> bool:
    """Registers the extern kernels and, unless CUDAL2_DISABLE_INDUCTOR_LOWERING=1, the lowerings (once per process).
    Returns whether the lowerings are active."""
    global _installed
    if _installed is None:
        _installed = False
        if _C is not None:
            try:
                _installed = _register(lower=not env_flag("CUDAL2_DISABLE_INDUCTOR_LOWERING"))
            except Exception as exc:  # noqa: BLE001 (torch internals: any failure keeps the fallback call)
                warnings.warn(f"cudal2: compiled code keeps calling torch.ops.cudal2 (Inductor lowering not "
                              f"installed: {exc!r})", RuntimeWarning, stacklevel=2)
    return _installed


def _register(lower: bool) -> bool:
    """The extern kernels are registered even when the lowerings are not: Inductor's on-disk cache does not key on
    them, so a process may be served code compiled with the lowerings, which must find its callables."""
    from torch._subclasses.fake_tensor import unset_fake_temporarily  # noqa: PLC0415

    with unset_fake_temporarily():  # imported while a fake mode traces the op: module-level tensors stay real
        from torch._inductor import ir, lowering  # noqa: PLC0415 (heavy: only when compiling)
        from torch._inductor.select_algorithm import extern_kernels  # noqa: PLC0415
        from torch._inductor.virtualized import V  # noqa: PLC0415

    extern_kernels.cudal2_linear = _C.linear_out
    extern_kernels.cudal2_matmul = _C.matmul_out
    if not lower:
        return False
    ops = torch.ops.cudal2
    fallback_linear = lowering.fallback_handler(ops.linear.default, add_to_fallback_set=False)
    fallback_matmul = lowering.fallback_handler(ops.matmul.default, add_to_fallback_set=False)

    def extern_out(name: str, inputs: list, like, size: list, fallback):
        """An ExternKernelOut calling extern_kernels.<name>(*inputs, out=<contiguous [size] buffer of like's dtype>);
        `fallback(*inputs)` where this torch's IR does not take it as built here."""
        try:
            layout = ir.FixedLayout(like.get_device(), like.get_dtype(), size,
                                    ir.FlexibleLayout.contiguous_strides(size))
            return ir.TensorBox.create(ir.ExternKernelOut(
                layout=layout, inputs=[ir.ExternKernel.realize_input(t) for t in inputs],
                python_kernel_name=f"extern_kernels.{name}"))
        except (TypeError, AttributeError) as exc:
            warnings.warn(f"cudal2: Inductor lowering of {name} failed ({exc!r}); compiled code calls torch.ops.cudal2",
                          RuntimeWarning, stacklevel=2)
            return fallback(*inputs)

    def lower_linear(x, weight, bias=None):
        if V.graph.cpp_wrapper or len(x.get_size()) < 2 or len(weight.get_size()) != 2:
            return fallback_linear(x, weight, bias)
        size = [*x.get_size()[:-1], weight.get_size()[0]]
        return extern_out("cudal2_linear", [x, weight] + ([] if bias is None else [bias]), x, size, fallback_linear)

    def lower_matmul(a, b):
        if V.graph.cpp_wrapper or len(a.get_size()) < 2 or len(b.get_size()) != 2:
            return fallback_matmul(a, b)
        return extern_out("cudal2_matmul", [a, b], a, [*a.get_size()[:-1], b.get_size()[1]], fallback_matmul)

    lowering.register_lowering(ops.linear.default, type_promotion_kind=None)(lower_linear)
    lowering.register_lowering(ops.matmul.default, type_promotion_kind=None)(lower_matmul)
    return True
