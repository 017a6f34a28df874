"""Family `tiny`: latency-bound GEMMs (tiny M x N x K, and long K with a small M x N), sm_80 to sm_90.

The template lives in `csrc/include/cudal2/tiny_gemm.cuh` (host ABI) and `tiny_kernel.cuh` (device): grid (n tiles,
m tiles, splits), no persistent scheduler, no workspace; A and B stream through a short cp.async pipeline into
mma.sync m16n8k16 (fp32 accumulation), each warp computing 32 x 32 outputs, and the epilogue stores from registers.
K is split on chip only: across the warps of the CTA (warps_k, reduced through shared memory) and, on sm_90, across
the CTAs of a thread-block cluster (runtime `splits`, reduced over distributed shared memory), in a fixed order.
Config fields used: dtype, layout, tile_m / tile_n (multiples of the 32 x 32 warp tile), tile_k (K per pipeline
stage), stages (>= 2), warps (split as (tile_m/32) x (tile_n/32) warps over the tile times warps_k groups along K).
The only runtime knob is `splits`; `knob_grid` lists the values the sweep times.
"""
from __future__ import annotations

import math

from cudal2_catalog.config import HgemmConfig, Knobs
from cudal2_catalog.families.mma_sync import (ELEMENT_BYTES, ELEMENTS, ROW_PAD, render_macro, smem_limit,
                                              split_knob_grid, unused_fields_problem)

FAMILY = "tiny"
SM_MIN, SM_MAX = 80, 90
WARP_TILE = 32                    # each warp computes WARP_TILE x WARP_TILE outputs
TILE_MN = (32, 64, 128)
TILE_K = (32, 64, 128)
WARPS = (1, 2, 4, 8, 16)
MAX_STAGES = 6
REGISTER_FILE = 65536             # 32-bit registers per SM, shared by the CTA's threads under __launch_bounds__
MAX_REGISTERS = 255
# Registers per thread: a fixed part (32 accumulators, double-buffered fragments, loop state) plus the unrolled
# cp.async copies (address and predicate per 16-byte chunk). ptxas (nvcc 13.0, sm_80 and sm_90) reported 64-98 for
# 2-8 chunks per thread, 96-128 for 10-24 and 195 for 32 (tiny_fp16_nt_32x32x128_s2_w1); this bound stays above all.
BASE_REGISTERS = 84
REGISTERS_PER_CHUNK = 4
MAX_CLUSTER_SPLITS = 8            # kMaxClusterSplits of cluster_splitk.cuh
KNOB_SPLITS = (1, 2, 3, 4, 6, 8)  # cluster split parts (1 = none); the default 0 fills the SMs for long K

# Every value each HgemmConfig field can take in this family (feasible() decides which combinations build).
SPACE: dict[str, tuple] = {
    "dtype": tuple(ELEMENTS),
    "layout": ("nn", "nt"),
    "tile_m": TILE_MN,
    "tile_n": TILE_MN,
    "tile_k": TILE_K,
    "stages": tuple(range(2, MAX_STAGES + 1)),
    "cluster_m": (1,),
    "cluster_n": (1,),
    "schedule": ("",),
    "scheduler": ("",),
    "warps": WARPS,
    "swap_ab": (False,),
    "epilogue": ("",),
    "splitk": ("",),
}
# Every value of each runtime knob: splits (0 = automatic; 1..8 cluster parts on sm_90, 1 before); swizzle and raster
# are ignored.
KNOB_SPACE: dict[str, tuple] = {"splits": tuple(range(MAX_CLUSTER_SPLITS + 1)), "swizzle": (0,), "raster": (0,)}


def warp_grid(cfg: HgemmConfig) -> tuple[int, int, int]:
    """(warps_m, warps_n, warps_k), as `Traits` in tiny_kernel.cuh derives them (warps_k may come out 0 or
    fractional for an infeasible config: feasible() checks it)."""
    warps_m, warps_n = cfg.tile_m // WARP_TILE, cfg.tile_n // WARP_TILE
    return warps_m, warps_n, cfg.warps // max(1, warps_m * warps_n)


def smem_bytes(cfg: HgemmConfig) -> int:
    """Dynamic shared memory of one CTA: the padded pipeline stages, the warps_k reduction scratch or the fp32
    cluster partial tile, whichever is largest."""
    b_rows, b_cols = (cfg.tile_n, cfg.tile_k) if cfg.layout == "nt" else (cfg.tile_k, cfg.tile_n)
    stage = (cfg.tile_m * (cfg.tile_k + ROW_PAD) + b_rows * (b_cols + ROW_PAD)) * ELEMENT_BYTES
    _, _, warps_k = warp_grid(cfg)
    tile_fp32 = cfg.tile_m * cfg.tile_n * 4
    return max(cfg.stages * stage, (warps_k - 1) * tile_fp32, tile_fp32)


def registers(cfg: HgemmConfig) -> int:
    """Estimated registers per thread (an upper bound of what ptxas reported; see BASE_REGISTERS)."""
    chunks = (cfg.tile_m + cfg.tile_n) * cfg.tile_k // 8 / (cfg.warps * 32)
    return BASE_REGISTERS + REGISTERS_PER_CHUNK * math.ceil(chunks)


def register_cap(cfg: HgemmConfig) -> int:
    """Registers per thread a CTA of `warps` warps may use (__launch_bounds__, one CTA per SM)."""
    return min(MAX_REGISTERS, REGISTER_FILE // (cfg.warps * 32))


def feasible(cfg: HgemmConfig, arch: int) -> tuple[bool, str]:
    """Whether `cfg` builds and runs on compute capability `arch`; (False, reason) otherwise. Pure."""
    if cfg.family != FAMILY:
        return False, f"family {cfg.family!r} is not {FAMILY}"
    if not SM_MIN <= arch <= SM_MAX:
        return False, f"tiny kernels run on compute capability {SM_MIN}..{SM_MAX}, not {arch}"
    if why := unused_fields_problem(cfg, FAMILY):
        return False, why
    if cfg.tile_m not in TILE_MN or cfg.tile_n not in TILE_MN:
        return False, f"tile_m and tile_n must be one of {TILE_MN}, got {cfg.tile_m}x{cfg.tile_n}"
    if cfg.tile_k not in TILE_K:
        return False, f"tile_k must be one of {TILE_K}, got {cfg.tile_k}"
    if not 2 <= cfg.stages <= MAX_STAGES:
        return False, f"stages must be in [2, {MAX_STAGES}], got {cfg.stages}"
    if cfg.warps not in WARPS:
        return False, f"warps must be one of {WARPS}, got {cfg.warps}"
    warps_m, warps_n, warps_k = warp_grid(cfg)
    if cfg.warps % (warps_m * warps_n):
        return False, (f"warps ({cfg.warps}) must be a multiple of the {warps_m}x{warps_n} warp tiles of "
                       f"{WARP_TILE}x{WARP_TILE} covering the {cfg.tile_m}x{cfg.tile_n} tile")
    if (cfg.tile_k // 16) % warps_k:
        return False, f"warps along K ({warps_k}) must divide tile_k/16 ({cfg.tile_k // 16})"
    if smem_bytes(cfg) > smem_limit(arch):
        return False, f"shared memory {smem_bytes(cfg)} B exceeds {smem_limit(arch)} B on sm_{arch}"
    if registers(cfg) > register_cap(cfg):
        return False, (f"estimated {registers(cfg)} registers per thread exceed the {register_cap(cfg)} that "
                       f"{cfg.warps * 32} threads per CTA may use")
    return True, ""


def knob_grid(cfg: HgemmConfig, m: int, n: int, k: int) -> list[Knobs]:
    """Runtime knob variants the sweep times beyond the automatic split (splits=0) for an M x N x K problem: each of
    KNOB_SPLITS up to the number of K tiles (the kernel rebalances and clamps the rest; before sm_90 every value runs
    unsplit); swizzle and raster are ignored by this family."""
    return split_knob_grid(cfg, k, KNOB_SPLITS)


def render(cfg: HgemmConfig) -> str:
    """The `.cu` body instantiating `cfg` (codegen prepends the generated-file header)."""
    return render_macro(cfg, "tiny_gemm.cuh", "CUDAL2_TINY_KERNEL")


def _config(dtype: str, layout: str, tile_m: int, tile_n: int, tile_k: int, stages: int, warps: int) -> HgemmConfig:
    return HgemmConfig(FAMILY, dtype, layout, tile_m, tile_n, tile_k, stages=stages, warps=warps)


def default_configs() -> list[HgemmConfig]:
    """The always-built set, per dtype and layout (not yet chosen by a sweep): a 32x64 tile with 4 warp groups along
    K (long K with a small M x N, e.g. 64x256x4096), a 64x64 tile with one warp per 32x32 outputs (tiny GEMMs, e.g.
    512x128x64, 2048x64x64) and a 64x128 tile with 2 warp groups along K (long K with a wider tile, e.g.
    128x1024x16384)."""
    shapes = [(32, 64, 64, 4, 8), (64, 64, 64, 3, 4), (64, 128, 64, 3, 16)]  # (tile_m, tile_n, tile_k, stages, warps)
    return [_config(dtype, layout, *shape) for dtype in ("fp16", "bf16") for layout in ("nt", "nn") for shape in shapes]
