"""Kernel families. Each module exposes `render(cfg) -> str` (the generated `.cu` source), `feasible(cfg, arch) ->
tuple[bool, str]` (pure: shared memory, registers, alignment, cluster limits), `default_configs() ->
list[HgemmConfig]` (the small always-built set), `knob_grid(cfg, m, n, k) -> list[Knobs]` (the runtime knob variants
the sweep times beyond the defaults), and `SM_MIN` / `SM_MAX`, the compute capabilities it targets (codegen
renders only configs feasible on at least one of them; kernels refuse other devices in `can_implement`)."""
from __future__ import annotations

import importlib
from types import ModuleType


def family_module(family: str) -> ModuleType:
    """The module implementing `family` (e.g. `search.families.sm90_tma_ws`)."""
    return importlib.import_module(f"search.families.{family}")
