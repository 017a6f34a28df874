"""What the mma.sync families (`decode`, `tiny`) share: element and layout spellings of their templates, the shared
memory an sm_80..sm_90 CTA may opt into, the check of the HgemmConfig fields they leave at their defaults, the split
knob grid and the one-macro instantiation they render. Not a family itself."""
from __future__ import annotations

import math

from cudal2_catalog.config import HgemmConfig, Knobs

ELEMENT_BYTES = 2
ROW_PAD = 8                       # elements of padding per shared-memory row (16 bytes): conflict-free ldmatrix
ELEMENTS = {"fp16": "__half", "bf16": "__nv_bfloat16"}
LAYOUT_NT = {"nt": "true", "nn": "false"}


def smem_limit(arch: int) -> int:
    """Opt-in shared memory per block (bytes) on compute capability `arch`."""
    return {80: 163 * 1024, 87: 163 * 1024, 90: 227 * 1024}.get(arch, 99 * 1024)


def unused_fields_problem(cfg: HgemmConfig, family: str) -> str:
    """Why `cfg` sets a field these families do not use (sm90_tma_ws's cluster, schedule, scheduler, swap_ab,
    epilogue; sm80_cute's splitk), or "" when it sets none."""
    if (cfg.cluster_m, cfg.cluster_n) != (1, 1) or cfg.schedule or cfg.scheduler or cfg.swap_ab or cfg.epilogue:
        return ("clusters, schedule, scheduler, swap_ab and epilogue are sm90_tma_ws fields; leave them at "
                "their defaults")
    if cfg.splitk:
        return f"the {family} family's split-K is its runtime splits knob; leave splitk empty"
    return ""


def family_problem(cfg: HgemmConfig, family: str, sm_min: int, sm_max: int, arch: int) -> str:
    """Why `cfg` is not a `family` config for compute capability `arch` before its own fields are looked at: another
    family, a capability outside sm_min..sm_max, or a field the family does not use; "" otherwise."""
    if cfg.family != family:
        return f"family {cfg.family!r} is not {family}"
    if not sm_min <= arch <= sm_max:
        return f"{family} kernels run on compute capability {sm_min}..{sm_max}, not {arch}"
    return unused_fields_problem(cfg, family)


def pipeline_problem(cfg: HgemmConfig, tile_k: tuple, max_stages: int, warps: tuple) -> str:
    """Why `cfg`'s tile_k, stages or warps is outside what an mma.sync family builds (`tile_k` and `warps` the allowed
    values, 2..`max_stages` stages), or "" when all three are within."""
    if cfg.tile_k not in tile_k:
        return f"tile_k must be one of {tile_k}, got {cfg.tile_k}"
    if not 2 <= cfg.stages <= max_stages:
        return f"stages must be in [2, {max_stages}], got {cfg.stages}"
    if cfg.warps not in warps:
        return f"warps must be one of {warps}, got {cfg.warps}"
    return ""


def space(tile_m: tuple, tile_n: tuple, tile_k: tuple, stages: tuple, warps: tuple) -> dict[str, tuple]:
    """Every value each HgemmConfig field can take in an mma.sync family: the given tiles, stages and warps, both
    dtypes and layouts, and the other families' fields at their defaults."""
    return {"dtype": tuple(ELEMENTS), "layout": ("nn", "nt"), "tile_m": tile_m, "tile_n": tile_n, "tile_k": tile_k,
            "stages": stages, "cluster_m": (1,), "cluster_n": (1,), "schedule": ("",), "scheduler": ("",),
            "warps": warps, "swap_ab": (False,), "epilogue": ("",), "splitk": ("",)}


def split_knob_grid(cfg: HgemmConfig, k: int, splits: tuple[int, ...]) -> list[Knobs]:
    """Knobs(splits=s) for each of `splits` up to the number of K tiles of a depth-`k` problem."""
    return [Knobs(splits=s) for s in splits if s <= math.ceil(k / cfg.tile_k)]


def render_macro(cfg: HgemmConfig, header: str, macro: str) -> str:
    """The `.cu` body instantiating `cfg` with `macro(NAME, T, NT, TILE_M, TILE_N, TILE_K, STAGES, WARPS)` from
    `cudal2/<header>` (codegen prepends the generated-file header)."""
    return (
        f'#include "cudal2/{header}"\n\n'
        f"{macro}({cfg.name}, {ELEMENTS[cfg.dtype]}, {LAYOUT_NT[cfg.layout]}, {cfg.tile_m}, "
        f"{cfg.tile_n}, {cfg.tile_k}, {cfg.stages}, {cfg.warps})\n"
    )
