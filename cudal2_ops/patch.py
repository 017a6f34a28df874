"""Route `torch.nn.Linear` layers through `cudal2_ops.linear`: process-wide, per model, or by module swap.

Three ways in, one rule per call:

- `patch_linear()` / `unpatch_linear()`: every `nn.Linear` in the process (until unpatched).
- `patch_linear(model, include=..., exclude=...)`: only `model`'s Linear modules whose qualified names match the
  fnmatch patterns; `patched_linear(...)` is the same as a context manager that restores the previous state.
- `swap_linear(model, ...)`: replaces matching modules by `CudaL2Linear` (an `nn.Linear` subclass sharing the same
  Parameter objects, so state_dict keys, optimizers and tied references stay valid); `unswap_linear` undoes it.

Per call, a routed layer takes the cudal2 path only when the input and weight (and bias) are plain CUDA tensors in
fp16/bf16 of one dtype -- or, under `torch.autocast("cuda")`, when they are tensors autocast would cast for `linear`,
in which case they are cast to the autocast dtype first, exactly as autocast would. Everything else calls
`F.linear(input, self.weight, self.bias)`, which is what `nn.Linear.forward` itself does, so CPU, fp32, fp64,
tensor subclasses (DTensor, ...) and mixed dtypes behave bit for bit as unpatched. The checks read only tensor
metadata and Python flags, so torch.compile traces them without graph breaks (flags become guards: patching or
unpatching after compilation triggers a recompile rather than a stale graph). Dynamo does not guard on class
attributes, so installing the patched `nn.Linear.forward` (the first patch while none is active) also drops code
compiled before (`torch.compiler.reset()`): it recompiles on its next call instead of running torch's forward.
TorchScript (torch.jit.script) compiles the plain F.linear path.

Subclasses of `nn.Linear` that override `forward` (LoRA, quantized layers, ...) are left alone unless
`include_subclasses=True`; then calls they make to `nn.Linear.forward` (e.g. `super().forward(x)`) are routed, while
their own logic stays as written.

Mechanism: while any patch is active, `nn.Linear.forward` is replaced by one function that checks a process flag
and a per-module flag (`_cudal2_route`, a plain attribute outside state_dict); the original is restored when the last
patch goes away. Copies of a patched module (deepcopy) carry the flag while a patch is installed.
"""
from __future__ import annotations

import contextlib
import copy
import fnmatch
import weakref
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn
from torch._subclasses.fake_tensor import FakeTensor

import cudal2_ops

__all__ = ["PatchSummary", "patch_linear", "unpatch_linear", "patched_linear", "CudaL2Linear", "swap_linear",
           "unswap_linear", "is_linear_patched"]

_HALF = (torch.float16, torch.bfloat16)
_AUTOCAST_INPUTS = (torch.float32, torch.float16, torch.bfloat16)
_PLAIN = (torch.Tensor, nn.Parameter, FakeTensor)  # FakeTensor: a plain tensor seen by a tracer (export, make_fx)
_FLAG = "_cudal2_route"

_TORCH_LINEAR_FORWARD = nn.Linear.forward
_global_on = False
_global_subclasses = False
_flagged: weakref.WeakSet[nn.Module] = weakref.WeakSet()
_plain_classes: dict[type, bool] = {}  # nn.Linear classes -> defines neither `weight` nor `bias` itself


@dataclass(frozen=True)
class PatchSummary:
    """What a patch call routed.

    scope: "process" (every nn.Linear) or "model". names: qualified names of routed modules ("model" scope).
    skipped: qualified names of matching subclasses left alone because they override forward.
    """

    scope: str
    names: tuple[str, ...] = ()
    skipped: tuple[str, ...] = ()


def _plain_cuda(t: torch.Tensor | None, dtypes: tuple[torch.dtype, ...]) -> bool:
    """True for None, or a plain CUDA tensor (not a subclass such as DTensor) whose dtype is in `dtypes`."""
    return t is None or (type(t) in _PLAIN and t.is_cuda and t.dtype in dtypes)


def _route_dtype(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.dtype | None:
    """The dtype F.linear would compute in if that is CUDA fp16/bf16 on plain tensors, else None (-> F.linear).

    Metadata-only, so traceable by torch.compile. Under CUDA autocast: the autocast dtype, if every tensor is one
    autocast casts for linear (fp32/fp16/bf16 CUDA). Otherwise: x.dtype, if x, weight and bias share one half dtype.
    """
    if not x.is_cuda:  # the common non-routed case first, cheaply
        return None
    if torch.is_autocast_enabled("cuda"):
        dtype = torch.get_autocast_dtype("cuda")
        ok = (dtype in _HALF and _plain_cuda(x, _AUTOCAST_INPUTS) and _plain_cuda(weight, _AUTOCAST_INPUTS)
              and _plain_cuda(bias, _AUTOCAST_INPUTS))
        return dtype if ok else None
    dtype = x.dtype  # checks inlined: this runs on every eager call of a routed layer (x is known to be CUDA)
    if (dtype in _HALF and weight.dtype == dtype and type(x) in _PLAIN and type(weight) in _PLAIN and weight.is_cuda
            and (bias is None or (bias.dtype == dtype and type(bias) in _PLAIN and bias.is_cuda))):
        return dtype
    return None


def _linear_params(module: nn.Linear) -> tuple[torch.Tensor, torch.Tensor | None]:
    """(module.weight, module.bias), read from the parameter dict when that is what they resolve to: nn.Module's
    attribute lookup costs about 1 us per name, a patched layer's largest host cost after the op. A class that
    defines either name (parametrizations make `weight` a property), or a module whose `_parameters` lacks one
    (weight_norm hooks, deleted or reassigned attributes), takes the attribute lookup."""
    cls = type(module)
    plain = _plain_classes.get(cls)
    if plain is None:
        plain = _plain_classes[cls] = not (hasattr(cls, "weight") or hasattr(cls, "bias"))
    params = module._parameters
    if plain and "weight" in params and "bias" in params:
        return params["weight"], params["bias"]
    return module.weight, module.bias


def _cudal2_linear_forward(module: nn.Linear, x: torch.Tensor) -> torch.Tensor:
    """y[..., N] = x[..., K] @ weight[N, K]^T + bias[N], via cudal2 when `_route_dtype` allows, else F.linear."""
    weight, bias = _linear_params(module)
    dtype = _route_dtype(x, weight, bias)
    if dtype is None:
        return F.linear(x, weight, bias)
    if x.dtype != dtype or weight.dtype != dtype or (bias is not None and bias.dtype != dtype):  # autocast's casts
        x, weight = x.to(dtype), weight.to(dtype)
        bias = None if bias is None else bias.to(dtype)
    return cudal2_ops.linear(x, weight, bias)


def _patched_forward(self: nn.Linear, input: torch.Tensor) -> torch.Tensor:
    """Installed as `nn.Linear.forward` while a patch is active. TorchScript compiles torch's own forward."""
    if not torch.jit.is_scripting():
        if self._cudal2_route or (_global_on and (_global_subclasses or type(self).forward is _patched_forward)):
            return _cudal2_linear_forward(self, input)
    return F.linear(input, self.weight, self.bias)


def _install() -> None:
    if nn.Linear.forward is not _patched_forward:
        nn.Linear._cudal2_route = False
        nn.Linear.forward = _patched_forward
        torch.compiler.reset()  # code traced through torch's forward has no guard that would see the new one


def _uninstall_if_unused() -> None:
    if _global_on or len(_flagged) or nn.Linear.forward is not _patched_forward:
        return
    nn.Linear.forward = _TORCH_LINEAR_FORWARD
    del nn.Linear._cudal2_route


def is_linear_patched(module: nn.Module | None = None) -> bool:
    """Whether the process-wide patch is on (no argument), or whether `module` (an nn.Linear) is routed."""
    if module is None:
        return _global_on
    return isinstance(module, CudaL2Linear) or module.__dict__.get(_FLAG, False) or (
        _global_on and (_global_subclasses or type(module).forward is _patched_forward))


def _overrides_forward(module: nn.Linear) -> bool:
    return type(module).forward not in (_TORCH_LINEAR_FORWARD, _patched_forward)


def _as_patterns(patterns: str | Iterable[str] | None) -> tuple[str, ...] | None:
    if patterns is None:
        return None
    return (patterns,) if isinstance(patterns, str) else tuple(patterns)


def _selected(model: nn.Module, include: str | Iterable[str] | None, exclude: str | Iterable[str] | None,
              kind: type[nn.Module] = nn.Linear) -> Iterator[tuple[str, nn.Module]]:
    """(qualified name, module) of every `kind` module in `model` that passes the include/exclude fnmatch filters."""
    inc, exc = _as_patterns(include), _as_patterns(exclude) or ()
    for name, module in model.named_modules():
        if not isinstance(module, kind):
            continue
        if inc is not None and not any(fnmatch.fnmatchcase(name, p) for p in inc):
            continue
        if any(fnmatch.fnmatchcase(name, p) for p in exc):
            continue
        yield name, module


def patch_linear(model: nn.Module | None = None, *, include: str | Iterable[str] | None = None,
                 exclude: str | Iterable[str] | None = None, include_subclasses: bool = False) -> PatchSummary:
    """Route nn.Linear forwards through `cudal2_ops.linear` (for CUDA fp16/bf16 calls). Idempotent.

    model None: every nn.Linear in the process (filters do not apply; `include_subclasses` also routes
    `super().forward` calls of subclasses that override forward). With a model: its Linear modules whose qualified
    names (as in `model.named_modules()`) match any `include` pattern (default: all) and no `exclude` pattern.
    Returns a PatchSummary of what was routed and which matching subclasses were skipped.
    """
    global _global_on, _global_subclasses
    _install()
    if model is None:
        if include is not None or exclude is not None:
            raise ValueError("include/exclude filter a model's modules; pass a model to use them")
        _global_on, _global_subclasses = True, include_subclasses
        return PatchSummary("process")
    names, skipped = [], []
    for name, module in _selected(model, include, exclude):
        if isinstance(module, CudaL2Linear):
            continue
        if _overrides_forward(module) and not include_subclasses:
            skipped.append(name)
            continue
        module._cudal2_route = True
        _flagged.add(module)
        names.append(name)
    return PatchSummary("model", tuple(names), tuple(skipped))


def unpatch_linear(model: nn.Module | None = None) -> None:
    """Undo `patch_linear`: the process-wide patch (no argument), or every per-module patch inside `model`.

    The two scopes are independent: unpatching the process leaves patched models patched, and vice versa.
    `nn.Linear.forward` is torch's own again once no patch of either scope remains.
    """
    global _global_on, _global_subclasses
    if model is None:
        _global_on = _global_subclasses = False
    else:
        for module in model.modules():
            if module.__dict__.pop(_FLAG, None) is not None:
                _flagged.discard(module)
    _uninstall_if_unused()


@contextlib.contextmanager
def patched_linear(model: nn.Module | None = None, **filters) -> Iterator[PatchSummary]:
    """Context manager around `patch_linear(model, **filters)`; on exit restores exactly the state before entry.

    Nesting is safe: an inner exit does not undo an outer patch.
    """
    global _global_on, _global_subclasses
    saved_global = (_global_on, _global_subclasses)
    saved_flags = [] if model is None else [(m, m.__dict__.get(_FLAG)) for m in model.modules()]
    try:
        yield patch_linear(model, **filters)
    finally:
        _global_on, _global_subclasses = saved_global
        for module, flag in saved_flags:
            if flag is None:
                if module.__dict__.pop(_FLAG, None) is not None:
                    _flagged.discard(module)
            else:
                module._cudal2_route = flag
                _flagged.add(module)
        _uninstall_if_unused()


def _clone_as(module: nn.Module, cls: type[nn.Module]) -> nn.Module:
    """A new `cls` instance with `module`'s attributes: same Parameter/buffer objects, copied hook/child containers."""
    new = cls.__new__(cls)
    state = {k: copy.copy(v) if isinstance(v, (dict, set)) else v for k, v in module.__dict__.items() if k != _FLAG}
    new.__dict__.update(state)
    return new


class CudaL2Linear(nn.Linear):
    """nn.Linear whose forward always uses the cudal2 rule (CUDA fp16/bf16 -> cudal2_ops.linear, else F.linear).

    Same parameters, buffers and state_dict keys as nn.Linear: x [..., in_features] -> [..., out_features].
    """

    def forward(self, input: torch.Tensor) -> torch.Tensor:
        if not torch.jit.is_scripting():  # TorchScript compiles (and runs) plain F.linear
            return _cudal2_linear_forward(self, input)
        return F.linear(input, self.weight, self.bias)

    @classmethod
    def from_linear(cls, linear: nn.Linear) -> CudaL2Linear:
        """Wrap `linear`'s own Parameter objects (no copy) in a CudaL2Linear."""
        return _clone_as(linear, cls)

    def to_linear(self) -> nn.Linear:
        """A plain nn.Linear over the same Parameter objects."""
        return _clone_as(self, nn.Linear)


def _replace(model: nn.Module, replacements: dict[int, nn.Module]) -> None:
    """Set every child slot of `model` that holds a module with id in `replacements` to its replacement."""
    for parent in list(model.modules()):
        for child_name, child in list(parent._modules.items()):
            if child is not None and id(child) in replacements:
                parent._modules[child_name] = replacements[id(child)]


def swap_linear(model: nn.Module, *, include: str | Iterable[str] | None = None,
                exclude: str | Iterable[str] | None = None) -> PatchSummary:
    """Replace `model`'s matching plain nn.Linear modules by CudaL2Linear, in place. Returns what was swapped.

    Only modules whose class is exactly nn.Linear are swapped (a subclass would lose its own behaviour); matching
    subclasses are listed as skipped. A module reachable under several names (tied) becomes one CudaL2Linear.
    `model` itself cannot be swapped (it has no parent): use `CudaL2Linear.from_linear`.
    """
    names, skipped, replacements = [], [], {}
    for name, module in _selected(model, include, exclude):
        if type(module) is nn.Linear and name:
            replacements[id(module)] = CudaL2Linear.from_linear(module)
            names.append(name)
        elif not isinstance(module, CudaL2Linear):
            skipped.append(name)
    _replace(model, replacements)
    return PatchSummary("model", tuple(names), tuple(skipped))


def unswap_linear(model: nn.Module) -> tuple[str, ...]:
    """Turn every CudaL2Linear inside `model` back into a plain nn.Linear (same Parameters). Returns their names."""
    pairs = list(_selected(model, None, None, kind=CudaL2Linear))
    _replace(model, {id(m): m.to_linear() for _, m in pairs})
    return tuple(name for name, _ in pairs)
