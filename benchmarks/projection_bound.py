"""How far patching nn.Linear can move an end-to-end decode step: the projections' share of the step, and the step
speedup that share bounds.

A decode step spends its time in the projections (the nn.Linear layers, what `patch_linear` routes) and in everything
else (norms, rotary embedding, attention, residual adds), which patching leaves as it is. `ProjectionChain` runs the
step's projections alone, back to back: every Linear of the model once, in model order, on inputs of the step's
shapes. Timed like the step (benchmarks/e2e.py, CUDA graphs), it gives the projections' time P, hence their share
P / S of the step time S. Each projection reads its whole weight from HBM once per step (a step's weights are far
larger than the L2), so P_floor = weight bytes / achievable bandwidth bounds any projection kernel from below, and

    ceiling = S / (S - P + P_floor)

bounds the step speedup of any replacement of the Linear layers. `bounds` also gives the projection speedup that a
target step speedup needs (`needed_projection_speedup`), or None where even P -> 0 would not reach it.
"""
from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

TARGET_STEP_SPEEDUP = 1.10


def linear_modules(model: nn.Module) -> list[nn.Linear]:
    """The model's nn.Linear modules in registration (= forward) order."""
    return [m for m in model.modules() if isinstance(m, nn.Linear)]


def weight_bytes(modules: list[nn.Linear]) -> int:
    """Bytes of the modules' weights: what their forward passes read from HBM at least once."""
    return sum(m.weight.numel() * m.weight.element_size() for m in modules)


class ProjectionChain:
    """Every Linear of `model` applied once, in order, to its own random input [batch, tokens, in_features]."""

    def __init__(self, model: nn.Module, batch: int, tokens: int = 1, seed: int = 0):
        self.modules = linear_modules(model)
        if not self.modules:
            raise ValueError("the model has no nn.Linear modules")
        weight = self.modules[0].weight
        gen = torch.Generator(device=weight.device).manual_seed(seed)
        self.inputs = [torch.randn(batch, tokens, m.in_features, device=weight.device, generator=gen).to(weight.dtype)
                       for m in self.modules]
        self.weight_bytes = weight_bytes(self.modules)

    def step(self) -> Callable[[], torch.Tensor]:
        """One pass over the chain (through each module's forward, patched or not); returns the last output."""
        def run() -> torch.Tensor:
            out = None
            for module, x in zip(self.modules, self.inputs):
                out = module(x)
            return out

        return run


def floor_ms(weight_bytes: int, bandwidth_gbs: float) -> float:
    """Time (ms) to stream `weight_bytes` once at `bandwidth_gbs` GB/s."""
    return weight_bytes / (bandwidth_gbs * 1e9) * 1e3


def bounds(step_ms: float, projections_ms: float, projections_floor_ms: float,
           target: float = TARGET_STEP_SPEEDUP) -> dict:
    """Share of the step in the projections, the step-speedup ceiling at the floor, and the projection speedup that
    `target` needs (None: unreachable even with free projections). All times from the unpatched model."""
    if not 0 < projections_ms <= step_ms:
        raise ValueError(f"projections ({projections_ms} ms) must take a positive part of the step ({step_ms} ms)")
    rest = step_ms - projections_ms
    allowed = step_ms / target - rest  # what the projections may take for the step to reach `target`
    return {"share": projections_ms / step_ms,
            "ceiling": step_ms / (rest + projections_floor_ms),
            "target": target,
            "needed_projection_speedup": projections_ms / allowed if allowed > 0 else None}
