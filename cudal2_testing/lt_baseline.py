"""The cuBLASLt baselines as docs/EVALUATION.md defines them, on the extension's baseline cuBLASLt instance (its own
handles, plans and tuning: nothing a baseline does reaches cudal2's dispatcher).

- heuristic: cuBLASLt's top heuristic algorithm (32 MiB workspace).
- autotune: every heuristic candidate (up to 100) timed by CUDA-graph replay, the fastest few and the heuristic's
  choice re-timed in interleaved rounds, the fastest kept per problem (the same selection `python -m cudal2_ops.tune` makes for cudal2's tables, so the bar is as strong
  as what cudal2 ships). Selected on the first call of a problem, which must not be inside a CUDA-graph capture.
"""
from __future__ import annotations

import torch

from cudal2_ops import tune
from cudal2_ops._extension import _C


class AutotunedLt:
    """cuBLASLt-autotune: `(a, b, out) -> out` for one B layout, the configuration chosen once per problem."""

    def __init__(self, layout: str):
        self.layout = layout
        self.chosen: dict[tuple, list[int]] = {}

    def key(self, a: torch.Tensor, b: torch.Tensor) -> tuple:
        """What the choice depends on: shape, dtype, strides and device of the operands."""
        return (a.shape, b.shape, a.stride(), b.stride(), a.dtype, a.device)

    def select(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> list[int]:
        """Times every candidate configuration of this problem and returns the fastest."""
        if torch.cuda.is_current_stream_capturing():
            raise RuntimeError("cuBLASLt-autotune: a problem's first call selects its algorithm and cannot be captured")
        configs = _C.testing.cublaslt_candidates(a, b, out, self.layout)

        def run(config: list[int]) -> None:
            _C.testing.cublaslt_run_config(a, b, None, out, self.layout, config)

        timed = tune.time_configs(configs, run)
        if not timed:
            raise RuntimeError(f"cuBLASLt-autotune: no candidate runs a {list(a.shape)} x {list(b.shape)} "
                               f"({self.layout}) problem")
        heuristic = next((t for t in timed if t.config == configs[0]), None)
        return tune.fastest(timed, lambda c: run(c.config), always=heuristic)[0].config

    def describe(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> dict | None:
        """The configuration chosen for this problem (None before its first call), in the tables' field order."""
        config = self.chosen.get(self.key(a, b))
        return None if config is None else {"path": "cublaslt", "cublaslt_config": list(config)}

    def __call__(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        key = self.key(a, b)
        config = self.chosen.get(key)
        if config is None:
            config = self.chosen[key] = self.select(a, b, out)
        _C.testing.cublaslt_run_config(a, b, None, out, self.layout, config)
        return out


def heuristic(layout: str):
    """cuBLASLt-heuristic: `(a, b, out) -> out` for one B layout."""
    def call(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        _C.testing.cublaslt_matmul(a, b, None, out, layout, "heuristic")
        return out
    return call
