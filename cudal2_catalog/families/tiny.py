"""Family `tiny`: latency-bound GEMMs (tiny M x N x K, and long K with a small M x N), sm_80 to sm_90.

The template lives in `csrc/include/cudal2/tiny_gemm.cuh` (host ABI) and `tiny_kernel.cuh` (device): grid (n tiles,
m tiles, splits), no persistent scheduler, no workspace. A and B stream through a cp.async pipeline whose first
stages - 1 K tiles are requested at once (a CTA's whole K range when it has at most stages - 1 tiles: one memory
round trip) into mma.sync m16n8k16 (fp32 accumulation). The warps form a warps_m x warps_n x warps_k layout
(`warp_layout`, mirrored by `warp_layout` in tiny_kernel.cuh): warp tiles of 16 or 32 per side, K groups first, so
that a small tile gets many warps with a few mma per K tile each. K is split on chip only: across the warp groups of
the CTA and, on sm_90, across the CTAs of a thread-block cluster (runtime `splits`, up to 16 with the non-portable
cluster attribute where the device co-schedules it, else 8). Partials are pushed into the receive buffer of the CTA
owning their rows (shared memory past the pipeline, remote over the cluster), one barrier, then each CTA sums its
rows in a fixed source order and stores them: deterministic. With one warp group and no split, the epilogue stores
straight from registers.
Config fields used: dtype, layout, tile_m / tile_n (16..128), tile_k (K per pipeline stage), stages (>= 2), warps.

Cost model (H100 SXM, ~1.75 GHz under load; to check against the sweep's measurements), time of one kernel node:
    t = t_node + t_round_trip + max(t_math, t_stream) + t_reduce + t_store
  t_node        1.09 us: an empty CUDA-graph kernel node (measured).
  t_round_trip  ~0.7 us: one dependent global-memory round trip (0.6-0.8 measured) for the tiles requested at once.
  t_math        mma per SM sub-partition x c_mma. c_mma ~16 cycles with one warp per sub-partition (tiny's first
                sweep: +0.33 us per 32 dependent-free mma per warp per 64 of K); ~8 cycles is mma.sync's peak on H100
                (~495 TFLOP/s) and needs several warps per sub-partition with independent mma. mma per CTA =
                tile_m * tile_n * k_range / 2048, spread over 4 sub-partitions.
  t_stream      bytes per SM beyond the first stages / ~32 B per cycle (all SMs loading: ~7 TB/s from L2); overlaps
                the math of the tiles already landed.
  t_reduce      in the CTA: a shared-memory write, a barrier and a read (~0.05 us); over a cluster: 8-byte remote
                stores, one cluster barrier and local reads (~0.2-0.3 us, not measured yet).
  t_store       ~0.2 us: the output's stores drain before the node completes.
Hence a tiny problem on one wave of small tiles costs about 1.09 + 0.7 + 0.1 + 0.05 + 0.2 ~ 2.0 us (cuBLASLt-autotune
2.2-2.5 us), and long K wants tiles x splits near the SM count so that each CTA's slice is a few K tiles.
"""
from __future__ import annotations

import math
from typing import NamedTuple

from cudal2_catalog.config import HgemmConfig, Knobs
from cudal2_catalog.families.mma_sync import (ELEMENT_BYTES, ROW_PAD, render_macro, smem_limit, space,
                                              split_knob_grid, unused_fields_problem)

FAMILY = "tiny"
SM_MIN, SM_MAX = 80, 90
MAX_WARP_TILE, MIN_WARP_TILE = 32, 16   # outputs per warp along M and N
TILE_MN = (16, 32, 64, 128)
TILE_K = (32, 64, 128)
WARPS = (1, 2, 4, 8, 16)
MAX_STAGES = 8
REGISTER_FILE = 65536             # 32-bit registers per SM, shared by the CTA's threads under __launch_bounds__
MAX_REGISTERS = 255
# Registers per thread: a fixed part (fragments, addresses, loop state), the fp32 accumulators of the warp tile and
# the unrolled cp.async copies (address and predicate per 16-byte chunk). ptxas (nvcc 13.0, sm_80 and sm_90)
# reported at most this bound on the configs compiled in tests/test_family_tiny.py.
BASE_REGISTERS = 52
REGISTERS_PER_CHUNK = 5
MAX_SPLITS = 16                   # kMaxSplits of tiny_kernel.cuh (non-portable cluster size)
RECV_PAD = 8                      # floats of padding per receive-buffer row (kRecvPitch = tile_n + 8)
KNOB_SPLITS = (1, 2, 4, 8, 16)    # cluster split parts the sweep times (1 = none); the default 0 fills the SMs

# Every value each HgemmConfig field can take in this family (feasible() decides which combinations build).
SPACE: dict[str, tuple] = space(TILE_MN, TILE_MN, TILE_K, tuple(range(2, MAX_STAGES + 1)), WARPS)
# Every value of each runtime knob: splits (0 = automatic; 1..16 cluster parts on sm_90, clamped to 8 where the device
# cannot co-schedule 16; 1 before sm_90); swizzle and raster are ignored.
KNOB_SPACE: dict[str, tuple] = {"splits": tuple(range(MAX_SPLITS + 1)), "swizzle": (0,), "raster": (0,)}


class WarpLayout(NamedTuple):
    """How the warps of a CTA cover its tile: m x n warp tiles of tile_m x tile_n outputs times k groups along K."""

    m: int
    n: int
    k: int
    tile_m: int
    tile_n: int


def warp_layout(cfg: HgemmConfig) -> WarpLayout:
    """The warp layout `warp_layout` in tiny_kernel.cuh derives (the same rule): warp tiles start at min(32, tile)
    per side, the K groups take as many warps as the tile's k16 steps allow, warps left over halve the larger
    warp-tile side (N on a tie) down to 16. When the warps do not fit, m * n * k != warps (feasible() says why)."""
    tile_m, tile_n = min(MAX_WARP_TILE, cfg.tile_m), min(MAX_WARP_TILE, cfg.tile_n)
    covering = (cfg.tile_m // tile_m) * (cfg.tile_n // tile_n)
    k = max(1, min(cfg.warps // covering, cfg.tile_k // 16))
    left = cfg.warps // (covering * k)
    while left > 1:
        if tile_n >= tile_m and tile_n > MIN_WARP_TILE:
            tile_n //= 2
        elif tile_m > MIN_WARP_TILE:
            tile_m //= 2
        else:
            break
        left //= 2
    return WarpLayout(cfg.tile_m // tile_m, cfg.tile_n // tile_n, k, tile_m, tile_n)


def pipeline_bytes(cfg: HgemmConfig) -> int:
    """Shared memory of the padded pipeline stages (A and B tiles of tile_k)."""
    b_rows, b_cols = (cfg.tile_n, cfg.tile_k) if cfg.layout == "nt" else (cfg.tile_k, cfg.tile_n)
    return cfg.stages * (cfg.tile_m * (cfg.tile_k + ROW_PAD) + b_rows * (b_cols + ROW_PAD)) * ELEMENT_BYTES


def receive_bytes(cfg: HgemmConfig) -> int:
    """Shared memory of the fp32 receive buffer: warps_k sources per split, each ceil(tile_m / splits) owned rows
    of tile_n + RECV_PAD floats, at most warps_k * (tile_m + MAX_SPLITS - 1) rows."""
    return warp_layout(cfg).k * (cfg.tile_m + MAX_SPLITS - 1) * (cfg.tile_n + RECV_PAD) * 4


def smem_bytes(cfg: HgemmConfig) -> int:
    """Dynamic shared memory of one CTA: the pipeline stages, then the receive buffer."""
    return pipeline_bytes(cfg) + receive_bytes(cfg)


def registers(cfg: HgemmConfig) -> int:
    """Estimated registers per thread (an upper bound of what ptxas reported; see BASE_REGISTERS)."""
    layout = warp_layout(cfg)
    chunks = (cfg.tile_m + cfg.tile_n) * cfg.tile_k // 8 / (cfg.warps * 32)
    return BASE_REGISTERS + layout.tile_m * layout.tile_n // 32 + REGISTERS_PER_CHUNK * math.ceil(chunks)


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
    layout = warp_layout(cfg)
    if layout.m * layout.n * layout.k != cfg.warps:
        most = (cfg.tile_m // MIN_WARP_TILE) * (cfg.tile_n // MIN_WARP_TILE) * (cfg.tile_k // 16)
        least = math.ceil(cfg.tile_m / MAX_WARP_TILE) * math.ceil(cfg.tile_n / MAX_WARP_TILE)
        return False, (f"{cfg.warps} warps do not fit a {cfg.tile_m}x{cfg.tile_n}x{cfg.tile_k} tile: between "
                       f"{least} (32x32 warp tiles) and {most} (16x16 warp tiles times tile_k/16 K groups)")
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


# The always-built shapes (tile_m, tile_n, tile_k, stages, warps), per dtype and layout (chosen from the cost model,
# not yet from a sweep of this version):
DEFAULT_SHAPES = (
    # 16x16 warp tiles x 4 K groups: tiny problems (64x64x64: 4 CTAs, 2 mma per warp) and long K with a small
    # M x N at splits 16 (64x64x8192: 64 CTAs; 128x64x8192: 128), 4 K tiles resident per CTA.
    (32, 32, 64, 5, 16),
    # 32x16 warp tiles x 4 K groups: G1000 problems below 2^24 (512x512x64 -> 128 CTAs) and 64x256x4096 at
    # splits 16 (128 CTAs, K range 256 = 4 tiles resident).
    (32, 64, 64, 5, 16),
    # 32x32 warp tiles x 2 K groups: larger tiny problems (1024x512, 8192x64) within one wave.
    (64, 64, 64, 4, 8),
    # 32x32 warp tiles, no K group: long K with a wider M x N (128x1024x16384 and 256x1024x8192 at splits 16 and 8:
    # 128 CTAs, the fewest operand re-reads through L2 that still fill the SMs).
    (128, 128, 32, 4, 16),
)


def default_configs() -> list[HgemmConfig]:
    """The always-built set: DEFAULT_SHAPES for each dtype and layout."""
    return [_config(dtype, layout, *shape) for dtype in ("fp16", "bf16") for layout in ("nt", "nn")
            for shape in DEFAULT_SHAPES]
