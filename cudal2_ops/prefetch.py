"""Weight prefetch plans: overlap the weight streaming of a CUDA-graph decode step with the kernels between its GEMMs.

In an LLM decode step each projection streams its weight from HBM, while the kernels between projections (norms,
rotary, attention, activations) leave HBM mostly idle. `plan_weight_prefetch(model, step)` runs `step()` once,
records the order in which `model`'s routed Linear layers are called, and groups consecutive calls on one input
(q/k/v, gate/up). The last layer of each group then carries the next group's weights: when it runs while a CUDA
graph is being captured, it arms an L2 prefetch of part of those weights (`cudal2_ops.ops.linear_prefetch`,
csrc/weight_prefetch.h), and the next cudal2 GEMM of the capture places it as a graph node that depends only on the
arming GEMM, so it runs beside the kernels in between, before the next group needs the weights. Results are
unchanged (a prefetch reads nothing into the SMs and writes nothing); a graph that ends before the next GEMM has no
prefetch node; eager calls arm nothing.

Each gap prefetches at most `budget_bytes` (default half the device's L2), as the same fraction of every weight of
the next group, spread evenly over rows and columns. Gaps with nothing between two groups (a plan recorded on a
step that has no other kernels) gain nothing and cost little: the prefetch then shares HBM with the GEMM.
Plans apply to calls that need no gradient; training steps run as without a plan.
"""
from __future__ import annotations

import contextlib
from collections.abc import Callable, Hashable, Iterator
from dataclasses import dataclass

import torch
from torch import nn

from cudal2_ops import patch

__all__ = ["WeightPrefetch", "PrefetchPlan", "plan_weight_prefetch", "clear_weight_prefetch",
           "paused_weight_prefetch", "plan_from_calls", "group_calls", "LinearCall"]

_ATTR = "_cudal2_prefetch"


@dataclass(frozen=True)
class WeightPrefetch:
    """What a routed Linear prefetches after its GEMM in a captured step: `fraction` (0-1] of each of `weights`."""

    weights: tuple[torch.Tensor, ...]
    fraction: float


@dataclass(frozen=True)
class PrefetchPlan:
    """A recorded plan.

    groups: qualified names of the routed Linear calls in call order, consecutive calls on one input grouped.
    group_bytes: the weight bytes of each group.
    fractions: the share of each group's weights prefetched in the gap before it (0 for the first group, and after a
    layer called more than once in the step, whose following gap is ambiguous).
    budget_bytes: the most bytes one gap prefetches.
    """

    groups: tuple[tuple[str, ...], ...]
    group_bytes: tuple[int, ...]
    fractions: tuple[float, ...]
    budget_bytes: int

    @property
    def prefetched_bytes(self) -> int:
        """Bytes prefetched per captured step."""
        return sum(int(f * b) for f, b in zip(self.fractions, self.group_bytes))


@dataclass(frozen=True)
class LinearCall:
    """One recorded call: the module's qualified name, the module, and the identity of its input."""

    name: str
    module: nn.Module
    input_key: Hashable


def group_calls(calls: list[LinearCall]) -> list[list[LinearCall]]:
    """Consecutive calls with the same input key form one group (layers applied to the same activations)."""
    groups: list[list[LinearCall]] = []
    for call in calls:
        if groups and groups[-1][-1].input_key == call.input_key:
            groups[-1].append(call)
        else:
            groups.append([call])
    return groups


def _input_key(x: torch.Tensor) -> Hashable:
    return (x.device, x.data_ptr(), tuple(x.shape), x.stride(), x.dtype)


def _record(model: nn.Module, step: Callable[[], object]) -> list[LinearCall]:
    """Runs `step()` once without gradients and returns the calls of `model`'s routed Linear layers, in order."""
    calls: list[LinearCall] = []
    names = {module: name for name, module in model.named_modules() if isinstance(module, nn.Linear)}

    def hook(module: nn.Module, args: tuple) -> None:
        x = args[0] if args else None
        if isinstance(x, torch.Tensor) and patch.takes_cudal2_path(module, x):
            calls.append(LinearCall(names[module], module, _input_key(x)))

    handles = [m.register_forward_pre_hook(hook) for m in names if patch.is_linear_patched(m)]
    try:
        with torch.no_grad():
            step()
    finally:
        for handle in handles:
            handle.remove()
    return calls


def _unique(tensors: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    seen: dict[int, torch.Tensor] = {}
    for t in tensors:
        seen.setdefault(id(t), t)
    return tuple(seen.values())


def _nbytes(tensors: tuple[torch.Tensor, ...]) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def plan_weight_prefetch(model: nn.Module, step: Callable[[], object], *, budget_bytes: int | None = None
                         ) -> PrefetchPlan:
    """Record `model`'s routed Linear calls in one run of `step()` and attach a prefetch plan to its layers.

    `step` runs the model eagerly (not compiled, not inside a capture), e.g. one decode step on real inputs; only
    layers routed by `patch_linear`/`swap_linear` at that moment are recorded. The plan replaces any earlier one on
    `model` and takes effect in CUDA graphs captured afterwards (eager, compiled or not). budget_bytes: the most
    bytes prefetched per gap (default: half the L2 of the device the weights are on). Returns the plan.
    """
    clear_weight_prefetch(model)
    calls = _record(model, step)
    if budget_bytes is None and calls:
        budget_bytes = torch.cuda.get_device_properties(calls[0].module.weight.device).L2_cache_size // 2
    return plan_from_calls(calls, budget_bytes or 0)


def plan_from_calls(calls: list[LinearCall], budget_bytes: int) -> PrefetchPlan:
    """Group `calls` (in step order) and attach to the last layer of each group the next group's weights, prefetched
    in the fraction min(1, budget_bytes / their bytes). Returns the plan."""
    groups = group_calls(calls)
    if not groups:
        return PrefetchPlan((), (), (), 0)
    if budget_bytes <= 0:
        raise ValueError(f"budget_bytes must be positive, got {budget_bytes}")
    weights = [_unique([c.module.weight for c in group]) for group in groups]
    fractions = [0.0]
    for prev, nxt in zip(groups, weights[1:]):
        owner = prev[-1].module
        if sum(c.module is owner for c in calls) > 1:
            fractions.append(0.0)  # called at several places in the step: which gap follows it is ambiguous
            continue
        fractions.append(min(1.0, budget_bytes / _nbytes(nxt)))
        setattr(owner, _ATTR, WeightPrefetch(nxt, fractions[-1]))
    return PrefetchPlan(tuple(tuple(c.name for c in g) for g in groups), tuple(_nbytes(w) for w in weights),
                        tuple(fractions), budget_bytes)


def clear_weight_prefetch(model: nn.Module) -> None:
    """Remove the prefetch plan from every layer of `model` (captures made afterwards prefetch nothing)."""
    for module in model.modules():
        module.__dict__.pop(_ATTR, None)


@contextlib.contextmanager
def paused_weight_prefetch(model: nn.Module) -> Iterator[None]:
    """Inside the block, `model`'s layers carry no prefetch plan (e.g. to capture its GEMMs alone); restored on exit."""
    saved = [(m, m.__dict__.pop(_ATTR)) for m in model.modules() if _ATTR in m.__dict__]
    try:
        yield
    finally:
        for module, prefetch in saved:
            setattr(module, _ATTR, prefetch)
