"""Family `decode`: memory-bound GEMM for LLM decode shapes (M <= 64), sm_80 to sm_90.

The template lives in `csrc/include/cudal2/decode_gemm.cuh` (host ABI) and `decode_kernel.cuh` (device): the
weight streams through a cp.async pipeline as the 16-row operand of mma.sync m16n8k16 (fp32 accumulation), the
small M is the 8-wide side, and split-K across CTAs (runtime `splits`, 0 = automatic) keeps every SM busy.
Config fields used: dtype, layout, tile_m (largest M handled: 8..64), tile_n (weight rows per CTA), tile_k (K per
pipeline stage), stages (>= 2), warps (split as warps_n x warps_k over the CTA tile), and the code-level weight
stream (`weight_stream`, see WEIGHT_STREAMS): "" = cp.async into padded rows (the default set), "evictfirst" = the
same with an L2 evict-first policy on the weight, "tma" = 2-D tensor-map copies into 128-byte swizzled rows
(sm_90). The only runtime knob is `splits`; `knob_grid` lists the values the sweep times.
"""
from __future__ import annotations

import dataclasses

from cudal2_catalog.config import HgemmConfig, Knobs
from cudal2_catalog.families.mma_sync import (ELEMENT_BYTES, ELEMENTS, LAYOUT_NT, ROW_PAD, family_problem,
                                              pipeline_problem, render_macro, smem_limit, space, split_knob_grid)

FAMILY = "decode"
SM_MIN, SM_MAX = 80, 90
TILE_M = (8, 16, 32, 64)
TILE_K = (32, 64, 128, 256)
WARPS = (1, 2, 4, 8, 16)
MAX_STAGES = 8
MAX_REGISTERS = 255
BASE_REGISTERS = 64               # addresses, loop state, predicates (rough: ptxas reports 64..186 in total)
KNOB_SPLITS = (1, 2, 4, 8, 16, 32)  # split-K parts (1 = none); the default 0 picks one resident wave
# Weight streams (config value -> the WeightStream enumerator of decode_weight_stream.cuh); "" is the default.
WEIGHT_STREAMS = {"": "kCpAsync", "evictfirst": "kCpAsyncEvictFirst", "tma": "kTma"}
TMA_MIN_ARCH = 90
TMA_BOX_COLS = 64                 # elements per 128-byte swizzled TMA box row
TMA_ALIGN_SLACK = 1024            # bytes to align the dynamic shared memory to the swizzle's 1 KiB
TMA_STAGE_ALIGN = 1024            # each stage starts 1 KiB aligned
MBARRIER_BYTES = 8                # one per stage

# Every value each HgemmConfig field can take in this family (feasible() decides which combinations build).
SPACE: dict[str, tuple] = {**space(TILE_M, tuple(range(16, 257, 16)), TILE_K, tuple(range(2, MAX_STAGES + 1)),
                                   WARPS), "weight_stream": tuple(WEIGHT_STREAMS)}
# Every value of each runtime knob: splits (0 = automatic, one resident wave); swizzle and raster are ignored.
KNOB_SPACE: dict[str, tuple] = {"splits": (0, *KNOB_SPLITS, 64), "swizzle": (0,), "raster": (0,)}


def warp_grid(cfg: HgemmConfig) -> tuple[int, int, int]:
    """(warps_n, warps_k, row tiles per warp), as `Traits` in decode_kernel.cuh derives them."""
    warps_n = min(cfg.warps, cfg.tile_n // 16)
    return warps_n, cfg.warps // warps_n, cfg.tile_n // 16 // warps_n


def weight_tile(cfg: HgemmConfig) -> tuple[int, int]:
    """(rows, columns) of the weight tile in shared memory: [tile_n][tile_k] for nt, [tile_k][tile_n] for nn."""
    return (cfg.tile_n, cfg.tile_k) if cfg.layout == "nt" else (cfg.tile_k, cfg.tile_n)


def smem_bytes(cfg: HgemmConfig) -> int:
    """Dynamic shared memory of one CTA, as `Traits::kSmemBytes` computes it: the largest of the pipeline stages (W
    and activation tiles; rows padded by 16 bytes except W's under TMA, dense and swizzled in 1 KiB aligned stages
    after 1 KiB of alignment room), the cross-warp reduction and the fp32 cluster tile; plus one mbarrier per stage
    under TMA."""
    w_rows, w_cols = weight_tile(cfg)
    x_elems = cfg.tile_m * (cfg.tile_k + ROW_PAD)
    tma = cfg.weight_stream == "tma"
    if tma:
        stage = -(-(w_rows * w_cols + x_elems) * ELEMENT_BYTES // TMA_STAGE_ALIGN) * TMA_STAGE_ALIGN
        pipe = TMA_ALIGN_SLACK + cfg.stages * stage
    else:
        pipe = cfg.stages * (w_rows * (w_cols + ROW_PAD) + x_elems) * ELEMENT_BYTES
    _, warps_k, _ = warp_grid(cfg)
    scratch = max(pipe, (warps_k - 1) * cfg.tile_n * cfg.tile_m * 4, cfg.tile_m * cfg.tile_n * 4)
    return scratch + (cfg.stages * MBARRIER_BYTES if tma else 0)


def weight_stream_problem(cfg: HgemmConfig, arch: int) -> str:
    """Why `cfg`'s weight stream cannot build or run on `arch`, or "" when it can: TMA needs sm_90 and W tile rows of
    whole 64-element boxes (tile_k for nt, tile_n for nn)."""
    stream = cfg.weight_stream
    if stream not in WEIGHT_STREAMS:
        return f"weight_stream must be one of {tuple(WEIGHT_STREAMS)}, got {stream!r}"
    if stream == "tma":
        if arch < TMA_MIN_ARCH:
            return f"the tma weight stream needs compute capability {TMA_MIN_ARCH}+, not {arch}"
        _, w_cols = weight_tile(cfg)
        if w_cols % TMA_BOX_COLS:
            side = "tile_k" if cfg.layout == "nt" else "tile_n"
            return f"the tma weight stream needs {side} ({w_cols}) to be a multiple of {TMA_BOX_COLS}"
    return ""


def registers(cfg: HgemmConfig) -> int:
    """Estimated registers per thread: accumulators + double-buffered A and B fragments + bookkeeping."""
    _, _, row_tiles = warp_grid(cfg)
    m_tiles = cfg.tile_m // 8
    return row_tiles * m_tiles * 4 + 2 * (row_tiles * 4 + m_tiles * 2) + BASE_REGISTERS


def feasible(cfg: HgemmConfig, arch: int) -> tuple[bool, str]:
    """Whether `cfg` builds and runs on compute capability `arch`; (False, reason) otherwise. Pure."""
    if why := family_problem(cfg, FAMILY, SM_MIN, SM_MAX, arch):
        return False, why
    if cfg.tile_m not in TILE_M:
        return False, f"tile_m must be one of {TILE_M}, got {cfg.tile_m}"
    if not (16 <= cfg.tile_n <= 256 and cfg.tile_n % 16 == 0):
        return False, f"tile_n must be a multiple of 16 in [16, 256], got {cfg.tile_n}"
    if why := pipeline_problem(cfg, TILE_K, MAX_STAGES, WARPS):
        return False, why
    if why := weight_stream_problem(cfg, arch):
        return False, why
    row_tiles16 = cfg.tile_n // 16
    if cfg.warps % row_tiles16 and row_tiles16 % cfg.warps:
        return False, f"warps ({cfg.warps}) must divide or be a multiple of tile_n/16 ({row_tiles16})"
    _, warps_k, _ = warp_grid(cfg)
    if (cfg.tile_k // 16) % warps_k:
        return False, f"warps along K ({warps_k}) must divide tile_k/16 ({cfg.tile_k // 16})"
    if smem_bytes(cfg) > smem_limit(arch):
        return False, f"shared memory {smem_bytes(cfg)} B exceeds {smem_limit(arch)} B on sm_{arch}"
    if registers(cfg) > MAX_REGISTERS:
        return False, f"estimated {registers(cfg)} registers per thread exceed {MAX_REGISTERS}"
    return True, ""


def declines(cfg: HgemmConfig, m: int, n: int, k: int) -> str:
    """Why `cfg`'s kernel declines an M x N x K problem whatever its strides (`can_implement` in decode_gemm.cuh: M
    up to tile_m, K and, for nn, N multiples of 8), or ""."""
    if m > cfg.tile_m:
        return f"decode kernels take M <= tile_m ({cfg.tile_m}), got M={m}"
    if k % 8 or (cfg.layout == "nn" and n % 8):
        return f"decode kernels need K{' and N' if cfg.layout == 'nn' else ''} to be multiples of 8, got N={n} K={k}"
    return ""


def knob_grid(cfg: HgemmConfig, m: int, n: int, k: int) -> list[Knobs]:
    """Runtime knob variants the sweep times beyond the automatic split (splits=0) for an M x N x K problem: each of
    KNOB_SPLITS up to the number of K tiles (the kernel clamps larger values to it); swizzle and raster are ignored
    by this family."""
    return split_knob_grid(cfg, k, KNOB_SPLITS)


def render(cfg: HgemmConfig) -> str:
    """The `.cu` body instantiating `cfg` (codegen prepends the generated-file header): CUDAL2_DECODE_KERNEL for the
    default weight stream, CUDAL2_DECODE_STREAM_KERNEL with the stream's enumerator otherwise."""
    stream = cfg.weight_stream
    if not stream:
        return render_macro(cfg, "decode_gemm.cuh", "CUDAL2_DECODE_KERNEL")
    return (
        '#include "cudal2/decode_gemm.cuh"\n\n'
        f"CUDAL2_DECODE_STREAM_KERNEL({cfg.name}, {ELEMENTS[cfg.dtype]}, {LAYOUT_NT[cfg.layout]}, {cfg.tile_m}, "
        f"{cfg.tile_n}, {cfg.tile_k}, {cfg.stages}, {cfg.warps}, {WEIGHT_STREAMS[stream]})\n"
    )


def _config(dtype: str, layout: str, tile_m: int, tile_n: int, tile_k: int, stages: int, warps: int) -> HgemmConfig:
    return HgemmConfig(FAMILY, dtype, layout, tile_m, tile_n, tile_k, stages=stages, warps=warps)


def default_configs() -> list[HgemmConfig]:
    """The always-built set, per dtype: NT (nn.Linear) for M <= 8/16/32/64 plus a 256-wide M <= 64 tile for sm_90
    (the fastest there on large N; can_implement refuses it where the shared memory does not fit), and NN for M <= 64.
    Shapes picked by the cold-weight sweep on an H200 (see tests/gpu/test_kernels_decode.py). Two more M <= 8 / 16
    tiles with under 114 KiB of shared memory fit two CTAs per SM; on the H200 they lead on mid-size weights (e.g.
    4096 x 4096 at M = 1: 62.5% of bandwidth against 59.2% for 8x128x128 in decode_bandwidth_2026-11-23_89aa740)."""
    shapes = [  # (layout, tile_m, tile_n, tile_k, stages, warps)
        ("nt", 8, 128, 128, 4, 8), ("nt", 16, 64, 128, 4, 4), ("nt", 32, 128, 128, 3, 8),
        ("nt", 64, 128, 128, 3, 8), ("nt", 64, 256, 64, 4, 8), ("nn", 64, 128, 128, 3, 8),
        ("nt", 8, 128, 64, 4, 8), ("nt", 16, 128, 64, 4, 8)]
    return [_config(dtype, *shape) for dtype in ("fp16", "bf16") for shape in shapes]


def weight_stream_candidates() -> list[HgemmConfig]:
    """The non-default weight streams to time against the default set (not built by default): each default config
    with the evictfirst stream, and with the tma stream where its tile allows (sm_90), plus tma configs with one more
    stage (the dense swizzled W rows leave room for it)."""
    out = []
    for cfg in default_configs():
        for stream in ("evictfirst", "tma"):
            twin = dataclasses.replace(cfg, weight_stream=stream)
            if feasible(twin, 90)[0]:
                out.append(twin)
        deeper = dataclasses.replace(cfg, weight_stream="tma", stages=cfg.stages + 1)
        if feasible(deeper, 90)[0]:
            out.append(deeper)
    return out
