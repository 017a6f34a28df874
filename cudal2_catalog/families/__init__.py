"""Kernel families. Each module exposes `render(cfg) -> str` (the generated `.cu` source), `feasible(cfg, arch) ->
tuple[bool, str]` (pure: shared memory, registers, alignment, cluster limits), `default_configs() ->
list[HgemmConfig]` (the small always-built set), `knob_grid(cfg, m, n, k) -> list[Knobs]` (the runtime knob variants
the sweep times beyond the defaults), and `SM_MIN` / `SM_MAX`, the compute capabilities it targets (codegen
renders only configs feasible on at least one of them; kernels refuse other devices in `can_implement`). A family
whose kernels decline problems by size alone (whatever the strides) also exposes `declines(cfg, m, n, k) -> str`."""
from __future__ import annotations

import importlib
from types import ModuleType

from cudal2_catalog.config import HgemmConfig, Knobs, config_of


def family_module(family: str) -> ModuleType:
    """The module implementing `family` (e.g. `cudal2_catalog.families.sm90_tma_ws`)."""
    return importlib.import_module(f"cudal2_catalog.families.{family}")


def knob_grid(name: str, m: int, n: int, k: int) -> list[Knobs]:
    """The runtime knob variants worth timing beyond the defaults for kernel `name` on an M x N x K problem: its
    family's `knob_grid`; none for a kernel whose name is not a generated config."""
    cfg = config_of(name)
    return family_module(cfg.family).knob_grid(cfg, m, n, k) if cfg else []


def declines(cfg: HgemmConfig, m: int, n: int, k: int) -> str:
    """Why a kernel of `cfg` declines every M x N x K problem of that size whatever its strides and alignment (its
    family's `declines`, as the kernel's `can_implement` decides), or "" when it may run it."""
    rule = getattr(family_module(cfg.family), "declines", None)
    return rule(cfg, m, n, k) if rule else ""
