"""Family `tiny`: latency-bound GEMMs (tiny M x N x K, and long K with a small M x N), sm_80 to sm_90. Third version.

The template lives in `csrc/include/cudal2/tiny_gemm.cuh` (host ABI, the launcher's rule) and `tiny_kernel.cuh`
(device): grid (n tiles, m tiles, splits), no persistent scheduler, no workspace. The warps covering the CTA tile
(`warp_layout`, mirrored by `warp_layout` in tiny_kernel.cuh: warp tiles of 16 or 32 per side, M x N first, at most
4 covering warps unless the tile needs more) run alone on a short K range; config `warps` beyond them are K groups
that the launcher adds only when a CTA's K range exceeds MAX_WARP_CHAIN_K. A K range of at most `stages` K tiles is
requested at once (one memory round trip, one barrier, shared memory for those tiles only); longer ones stream through
the stages-deep cp.async pipeline into mma.sync m16n8k16 (fp32 accumulation). With one warp group and no split the
epilogue stores from registers: bias loaded before the main loop, a 4x4 shuffle transpose per quad of lanes, 16-byte
stores. K is otherwise split across the K groups and, on sm_90, across the CTAs of a thread-block cluster (runtime
`splits`, up to 16 with the non-portable cluster attribute where the device co-schedules it, else 8); partials are
pushed into the receive buffer of the CTA owning their rows, one barrier, then each CTA sums its rows in a fixed
source order and stores them: deterministic. A request for more splits than a cluster holds (up to MAX_GRID_SPLITS)
splits K across the grid: a cooperative launch whose CTAs push their partial rows into the owners' slots of the
workspace, meet at one grid barrier and sum their rows the same way (one kernel, deterministic), where the device
takes cooperative launches and holds every CTA at once (else the request is clamped to a cluster).
Config fields used: dtype, layout, tile_m / tile_n (16..128), tile_k (K per stage), stages (>= 2), warps (covering
warps times the most K groups).

Where the second version's fixed latency went (read from its code, not profiled; 64x64x64 fp16 on an H100: 2.5 us
against cuBLASLt's 2.2 and sm80_cute's 2.1 with 2 warps on 16x64 tiles): 16 warps on a 32x32 tile (4 K groups of 2x2
16x16 warp tiles, 2 mma per warp), so 512 threads to launch and to meet at every barrier for 4096 outputs; after the
math a second round through shared memory (every warp writes its 16x16 fp32 partial, a CTA barrier, 256 threads sum 4
sources and store 4-byte pairs, reading the bias only then: a dependent global load in the tail). Its 5 stages cost
no wait at K = 64 (the 3 empty cp.async groups complete at once), only footprint: 76-79 KB per CTA (5 stages of which
one is used, plus a 30 KB receive buffer sized for 16 splits), which matters only where it limits co-residency or
changes the carveout between kernels. sm80_cute stages its epilogue through shared memory too (two barriers, 16-byte
stores, the bias read after the math), but with 64 threads and no reduction. Long K scaled badly because every K
tile costs a 512-thread wait and barrier while each warp does 2 mma, and because one SM streams a CTA's whole operand
range (64 KB at K = 512 on 32x32 tiles) unless the cluster split spreads it.

Cost model (H100 SXM, ~1.75 GHz under load; to check against the sweep's measurements), time of one kernel node:
    t = t_node + t_round_trip + max(t_math, t_stream) + t_reduce + t_store
  t_node        1.09 us: an empty CUDA-graph kernel node (measured; benchmarks.latency_floor re-measures it).
  t_round_trip  ~0.7 us: one dependent global-memory round trip (0.6-0.8 measured) for the tiles requested at once.
  t_math        per warp, the dependent chain of K / 16 mma per accumulator (~30 cycles each on a short chain); K
                groups cut it by their count for a reduction round, worth it above MAX_WARP_CHAIN_K (not measured).
  t_stream      bytes per SM beyond the tiles requested at once / ~32 B per cycle; overlaps the landed tiles' math.
  t_reduce      0 with one warp group and no split (register epilogue); in the CTA: a shared-memory write, a barrier
                and a read (~0.05 us); over a cluster: remote stores, one cluster barrier, local reads (~0.2-0.3 us).
  t_store       ~0.2 us: the output's stores drain before the node completes (16-byte stores: a quarter of the
                instructions of 4-byte pairs).
Hence a tiny problem on one wave of small tiles should cost about 1.09 + 0.7 + 0.1 + 0.2 ~ 2.1 us; the latency floor
(benchmarks.latency_floor: an empty kernel, and a kernel that only reads A and B and writes C) says how much of that
any kernel must pay.
"""
from __future__ import annotations

import math
from typing import NamedTuple

from cudal2_catalog.config import HgemmConfig, Knobs
from cudal2_catalog.families.mma_sync import (ELEMENT_BYTES, ROW_PAD, family_problem, pipeline_problem, render_macro,
                                              smem_limit, space, split_knob_grid)

FAMILY = "tiny"
SM_MIN, SM_MAX = 80, 90
MAX_WARP_TILE, MIN_WARP_TILE = 32, 16   # outputs per warp along M and N
TILE_MN = (16, 32, 64, 128)
TILE_K = (32, 64, 128)
WARPS = (1, 2, 4, 8, 16)
MAX_STAGES = 8
MAX_COVERING_WARPS = 4            # kMaxCoveringWarps of tiny_kernel.cuh
MAX_WARP_CHAIN_K = 256            # kMaxWarpChainK of tiny_gemm.cuh: longer CTA K ranges add the K groups
REGISTER_FILE = 65536             # 32-bit registers per SM, shared by the CTA's threads under __launch_bounds__
MAX_REGISTERS = 255
# Registers per thread: a fixed part (fragments, addresses, loop state, bias), the fp32 accumulators of the warp tile,
# the unrolled cp.async copies of the covering warps' body (address and predicate per 16-byte chunk) and a share per
# K group (the K-group body is compiled beside it). ptxas (nvcc 13.0, sm_80 and sm_90) reported at most this bound on
# the configs compiled in tests/test_family_tiny.py (16x16x128 NN with 8 K groups: 172 of 172 on sm_80).
BASE_REGISTERS = 60
REGISTERS_PER_CHUNK = 5
REGISTERS_PER_GROUP = 3
MAX_SPLITS = 16                   # kMaxSplits of tiny_kernel.cuh (non-portable cluster size)
MAX_GRID_SPLITS = 64              # kMaxGridSplits of tiny_gemm.cuh (the grid-wide split)
RECV_PAD = 8                      # floats of padding per receive-buffer row (kRecvPitch = tile_n + 8)
# Split parts the sweep times (1 = none; up to 16 in a cluster, 32 and 64 across the grid); the default 0 fills the
# SMs within a cluster.
KNOB_SPLITS = (1, 2, 4, 8, 16, 32, 64)

# Every value each HgemmConfig field can take in this family (feasible() decides which combinations build).
SPACE: dict[str, tuple] = space(TILE_MN, TILE_MN, TILE_K, tuple(range(2, MAX_STAGES + 1)), WARPS)
# Every value of each runtime knob: splits (0 = automatic; 1..16 cluster parts on sm_90, clamped to 8 where the device
# cannot co-schedule 16; 17..64 across the grid where it fits; 1 before sm_90); swizzle and raster are ignored.
KNOB_SPACE: dict[str, tuple] = {"splits": tuple(range(MAX_GRID_SPLITS + 1)), "swizzle": (0,), "raster": (0,)}


class WarpLayout(NamedTuple):
    """How the warps of a CTA cover its tile: m x n warp tiles of tile_m x tile_n outputs times k groups along K (the
    most; a launch uses 1 or k)."""

    m: int
    n: int
    k: int
    tile_m: int
    tile_n: int


def warp_layout(cfg: HgemmConfig) -> WarpLayout:
    """The warp layout `warp_layout` in tiny_kernel.cuh derives (the same rule): warp tiles start at min(32, tile)
    per side and halve their larger side (N on a tie) down to 16 while the covering warps stay within
    min(warps, MAX_COVERING_WARPS); the warps left over form K groups (at most tile_k / 16). When the warps do not
    fit, m * n * k != warps (feasible() says why)."""
    tile_m, tile_n = min(MAX_WARP_TILE, cfg.tile_m), min(MAX_WARP_TILE, cfg.tile_n)
    most = min(cfg.warps, MAX_COVERING_WARPS)
    while (cfg.tile_m // tile_m) * (cfg.tile_n // tile_n) * 2 <= most:
        if tile_n >= tile_m and tile_n > MIN_WARP_TILE:
            tile_n //= 2
        elif tile_m > MIN_WARP_TILE:
            tile_m //= 2
        else:
            break
    m, n = cfg.tile_m // tile_m, cfg.tile_n // tile_n
    return WarpLayout(m, n, min(max(1, cfg.warps // (m * n)), cfg.tile_k // 16), tile_m, tile_n)


class LaunchPlan(NamedTuple):
    """What one launch uses (TinyGemm::plan in tiny_gemm.cuh, given its split count): per CTA, and the grid-wide
    split's fp32 workspace slots per output tile (0 in a cluster)."""

    tiles_per_split: int
    warp_groups: int
    stages: int
    threads: int
    smem_bytes: int
    workspace_bytes_per_tile: int = 0


def stage_bytes(cfg: HgemmConfig) -> int:
    """Shared memory of one padded pipeline stage (A and B tiles of tile_k)."""
    b_rows, b_cols = (cfg.tile_n, cfg.tile_k) if cfg.layout == "nt" else (cfg.tile_k, cfg.tile_n)
    return (cfg.tile_m * (cfg.tile_k + ROW_PAD) + b_rows * (b_cols + ROW_PAD)) * ELEMENT_BYTES


def pipeline_bytes(cfg: HgemmConfig) -> int:
    """Shared memory of all the pipeline stages (what a streamed K range uses)."""
    return cfg.stages * stage_bytes(cfg)


def receive_bytes(cfg: HgemmConfig, groups: int | None = None, splits: int | None = None) -> int:
    """Shared memory of the fp32 receive buffer of a launch with `groups` K groups and `splits` split CTAs:
    groups x splits sources of ceil(tile_m / splits) owned rows of tile_n + RECV_PAD floats, none with one source.
    By default the bound over every launch: the most K groups, tile_m + MAX_SPLITS - 1 rows (s * ceil(m / s) <= m + s
    - 1 for s <= MAX_SPLITS)."""
    groups = warp_layout(cfg).k if groups is None else groups
    if splits is None:
        rows = cfg.tile_m + MAX_SPLITS - 1
    elif groups * splits == 1:
        return 0
    else:
        rows = splits * math.ceil(cfg.tile_m / splits)
    return groups * rows * (cfg.tile_n + RECV_PAD) * 4


def smem_bytes(cfg: HgemmConfig) -> int:
    """The most dynamic shared memory one CTA uses (every stage, every K group, 16 splits): what feasible() and the
    template's can_implement require."""
    return pipeline_bytes(cfg) + receive_bytes(cfg)


def launch_plan(cfg: HgemmConfig, k: int, splits: int) -> LaunchPlan:
    """The launcher's rule for depth `k` split over `splits` CTAs (as TinyGemm::splits chose it, on a device that
    co-schedules clusters of 16): ceil(K tiles / splits) tiles per CTA; K groups only when that K range exceeds
    MAX_WARP_CHAIN_K; stage buffers for the whole range when it fits `stages`, else `stages`; a receive buffer only
    with several sources in a CTA or a cluster; beyond MAX_SPLITS the partials meet in the workspace instead (per
    tile: splits owners x splits * groups sources x ceil(tile_m / splits) rows of tile_n + RECV_PAD floats)."""
    tiles = math.ceil(math.ceil(k / cfg.tile_k) / splits)
    layout = warp_layout(cfg)
    groups = layout.k if tiles * cfg.tile_k > MAX_WARP_CHAIN_K else 1
    stages = min(cfg.stages, tiles)
    threads = layout.m * layout.n * groups * 32
    if splits > MAX_SPLITS:
        rows = math.ceil(cfg.tile_m / splits)
        workspace = splits * splits * groups * rows * (cfg.tile_n + RECV_PAD) * 4
        return LaunchPlan(tiles, groups, stages, threads, stages * stage_bytes(cfg), workspace)
    smem = stages * stage_bytes(cfg) + receive_bytes(cfg, groups, splits)
    return LaunchPlan(tiles, groups, stages, threads, smem)


def registers(cfg: HgemmConfig) -> int:
    """Estimated registers per thread (an upper bound of what ptxas reported; see BASE_REGISTERS): the copies are
    unrolled for the covering warps alone (the one-group body, the most chunks per thread)."""
    layout = warp_layout(cfg)
    chunks = (cfg.tile_m + cfg.tile_n) * cfg.tile_k // 8 / (layout.m * layout.n * 32)
    return (BASE_REGISTERS + layout.tile_m * layout.tile_n // 32 + REGISTERS_PER_CHUNK * math.ceil(chunks)
            + REGISTERS_PER_GROUP * layout.k)


def register_cap(cfg: HgemmConfig) -> int:
    """Registers per thread a CTA of `warps` warps may use (__launch_bounds__, one CTA per SM)."""
    return min(MAX_REGISTERS, REGISTER_FILE // (cfg.warps * 32))


def feasible(cfg: HgemmConfig, arch: int) -> tuple[bool, str]:
    """Whether `cfg` builds and runs on compute capability `arch`; (False, reason) otherwise. Pure."""
    if why := family_problem(cfg, FAMILY, SM_MIN, SM_MAX, arch):
        return False, why
    if cfg.tile_m not in TILE_MN or cfg.tile_n not in TILE_MN:
        return False, f"tile_m and tile_n must be one of {TILE_MN}, got {cfg.tile_m}x{cfg.tile_n}"
    if why := pipeline_problem(cfg, TILE_K, MAX_STAGES, WARPS):
        return False, why
    layout = warp_layout(cfg)
    if layout.m * layout.n * layout.k != cfg.warps:
        covering = layout.m * layout.n
        return False, (f"{cfg.warps} warps do not fit a {cfg.tile_m}x{cfg.tile_n}x{cfg.tile_k} tile: its "
                       f"{covering} covering warps times 1..{cfg.tile_k // 16} K groups")
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


# The always-built shapes (tile_m, tile_n, tile_k, stages, warps), per dtype and layout (chosen from the cost model
# and the second version's sweep, not yet from a sweep of this version). 4 covering warps each but the widest; K groups
# only join on K ranges above MAX_WARP_CHAIN_K; a K range of up to `stages` K tiles is one round trip.
DEFAULT_SHAPES = (
    # 2x2 warps of 16x16 (+2 K groups): tiny problems (64x64x64: 4 CTAs of 128 threads, one stage of 9-10 KB), up to
    # K = 384 in one round trip; long K with a small M x N at splits 16.
    (32, 32, 64, 6, 8),
    # 1x4 warps of 16x16 (+2 K groups): the 16-row tile that won the smallest NT problems for sm80_cute (2 warps
    # there); 16-row problems and M below 64 waste no rows.
    (16, 64, 64, 6, 8),
    # 2x2 warps of 32x32 (+2 K groups): larger tiny problems (1024x512, 8192x64) within one wave.
    (64, 64, 64, 4, 8),
    # 4x4 warps of 32x32, no K group: long K with a wider M x N (128x1024x16384 and 256x1024x8192 at splits 16 and 8:
    # 128 CTAs, the fewest operand re-reads through L2 that still fill the SMs).
    (128, 128, 32, 4, 16),
)


def default_configs() -> list[HgemmConfig]:
    """The always-built set: DEFAULT_SHAPES for each dtype and layout."""
    return [_config(dtype, layout, *shape) for dtype in ("fp16", "bf16") for layout in ("nt", "nn")
            for shape in DEFAULT_SHAPES]
