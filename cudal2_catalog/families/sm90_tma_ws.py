"""Family `sm90_tma_ws`: CUTLASS 3.x TMA + WGMMA warp-specialized GEMM for sm_90a (H100/H200).

The template lives in `csrc/include/cudal2/sm90_tma_ws.cuh`; each config becomes one explicit instantiation.
Config fields used: dtype, layout, tile_m/n/k, stages (0 = auto carve-out), cluster_m/n, schedule ("coop" |
"pingpong"), scheduler ("persistent" | "streamk"), swap_ab (nt only: D^T = W A^T, tile_m over weight rows and
tile_n, a multiple of 8, over M), epilogue ("" = fusion staged in shared memory and stored by TMA | "nosmem" =
stored straight from registers, persistent scheduler only: its shared memory goes to mainloop stages and there is no
store descriptor, for small tiles and small problems). Runtime knobs (see the header): raster (1 = along M, 2 = along
N), swizzle (the tile scheduler's max_swizzle_size) and, for stream-K kernels, splits (1 = data parallel, s > 1 =
split-K in s parts); `knob_grid` lists the variants the sweep times.
"""
from __future__ import annotations

from cudal2_catalog.config import HgemmConfig, Knobs

FAMILY = "sm90_tma_ws"
SM_MIN = SM_MAX = 90  # sm_90a code runs on compute capability 9.0 only

SMEM_BYTES = 227 * 1024          # opt-in shared memory per block on sm90
ELEMENT_BYTES = 2                 # fp16 / bf16
MAX_ACCUMULATORS_PER_THREAD = 128  # fp32 accumulators per consumer thread that fit the 255-register budget
EPILOGUE_STAGES = 2               # CUTLASS's TMA store stages for D when there is no C operand
BARRIER_BYTES = 1024              # pipeline barriers, tile-scheduler and bias bookkeeping (generous)

SCHEDULES = {"coop": "kCooperative", "pingpong": "kPingpong"}
SCHEDULERS = {"persistent": "kPersistent", "streamk": "kStreamK"}
EPILOGUES = {"": "kTma", "nosmem": "kNoSmem"}
ELEMENTS = {"fp16": "cutlass::half_t", "bf16": "cutlass::bfloat16_t"}
DTYPE_CODES = {"fp16": "CUDAL2_FP16", "bf16": "CUDAL2_BF16"}
LAYOUT_CODES = {"nn": "CUDAL2_NN", "nt": "CUDAL2_NT"}
TILE_M = {"coop": (128, 256), "pingpong": (64, 128)}  # coop splits M over 2 consumer warpgroups of 64 rows
TILE_K = (32, 64, 128)
CLUSTER_DIMS = (1, 2, 4)
MAX_CLUSTER_SIZE = 8              # portable cluster size (larger needs the non-portable launch attribute)
MULTICAST_MIN_ROWS = 8            # rows of the operand tile each CTA of a multicast cluster loads, at least
MAX_STAGES = 16
KNOB_SWIZZLES = (1, 2, 4, 8)      # max_swizzle_size: output tiles walked together (L2 reuse of A/B tiles)
KNOB_RASTERS = (1, 2)             # along M, along N
KNOB_STREAMK_SPLITS = (1, 2, 4)   # stream-K scheduler only: data parallel, split-K in 2 or 4 parts

# Every value each HgemmConfig field can take in this family (feasible() decides which combinations build).
SPACE: dict[str, tuple] = {
    "dtype": ("fp16", "bf16"),
    "layout": ("nn", "nt"),
    "tile_m": (64, 128, 256),
    "tile_n": tuple(range(8, 257, 8)),
    "tile_k": TILE_K,
    "stages": (0, *range(2, MAX_STAGES + 1)),
    "cluster_m": CLUSTER_DIMS,
    "cluster_n": CLUSTER_DIMS,
    "schedule": tuple(SCHEDULES),
    "scheduler": tuple(SCHEDULERS),
    "warps": (0,),
    "swap_ab": (False, True),
    "epilogue": tuple(EPILOGUES),
    "splitk": ("",),
}
# Every value of each runtime knob (0 = the kernel's default: heuristic raster, no swizzle, heuristic stream-K
# decomposition). splits other than 0 only matter to stream-K kernels.
KNOB_SPACE: dict[str, tuple] = {
    "splits": (0, 1, 2, 3, 4, 6, 8, 16),
    "swizzle": (0, 1, 2, 4, 8),
    "raster": (0, 1, 2),
}


def consumer_threads(schedule: str) -> int:
    """Threads that hold accumulators for one tile: 2 warpgroups (coop) or 1 (pingpong)."""
    return 256 if schedule == "coop" else 128


def epilogue_tile(cfg: HgemmConfig) -> tuple[int, int]:
    """CUTLASS's EpilogueTileAuto for 16-bit D: (min(128|64, tile_m), gcd-limited 32 columns)."""
    rows = min(128 if cfg.schedule == "coop" else 64, cfg.tile_m)
    cols = min(32, cfg.tile_n)
    while cfg.tile_n % cols:
        cols //= 2
    return rows, cols


def epilogue_smem_bytes(cfg: HgemmConfig) -> int:
    """Shared memory of the epilogue: staged D tiles for the TMA store, the bias row, barriers (barriers only for
    the no-smem epilogue)."""
    if cfg.epilogue == "nosmem":
        return BARRIER_BYTES
    rows, cols = epilogue_tile(cfg)
    return EPILOGUE_STAGES * rows * cols * ELEMENT_BYTES + cfg.tile_n * ELEMENT_BYTES + BARRIER_BYTES


def stage_bytes(cfg: HgemmConfig) -> int:
    """Shared memory of one mainloop stage (an A tile and a B tile)."""
    return (cfg.tile_m + cfg.tile_n) * cfg.tile_k * ELEMENT_BYTES


def auto_stages(cfg: HgemmConfig) -> int:
    """Stages CUTLASS's StageCountAutoCarveout picks: whatever fits after the epilogue."""
    return (SMEM_BYTES - epilogue_smem_bytes(cfg)) // stage_bytes(cfg)


def feasible(cfg: HgemmConfig, arch: int) -> tuple[bool, str]:
    """Whether `cfg` builds and runs on compute capability `arch`; (False, reason) otherwise. Pure."""
    if cfg.family != FAMILY:
        return False, f"family {cfg.family!r} is not {FAMILY}"
    if arch != SM_MIN:
        return False, f"sm_90a code runs on compute capability 90 only, not {arch}"
    if cfg.schedule not in SCHEDULES:
        return False, f"schedule must be one of {sorted(SCHEDULES)}, got {cfg.schedule!r}"
    if cfg.scheduler not in SCHEDULERS:
        return False, f"scheduler must be one of {sorted(SCHEDULERS)}, got {cfg.scheduler!r}"
    if cfg.scheduler == "streamk" and cfg.schedule != "coop":
        return False, "the stream-K scheduler needs the cooperative schedule"
    if cfg.warps:
        return False, "warps is fixed by the schedule (3 warpgroups coop / pingpong); leave it 0"
    if cfg.tile_m not in TILE_M[cfg.schedule]:
        return False, f"{cfg.schedule} needs tile_m in {TILE_M[cfg.schedule]}, got {cfg.tile_m}"
    if cfg.swap_ab and cfg.layout != "nt":
        return False, "swapped operands are built for the nt layout (nn.Linear) only"
    tile_n_step = 8 if cfg.swap_ab else 16  # WGMMA N; the B tile of A rows needs no 16-row granule
    if not (tile_n_step <= cfg.tile_n <= 256 and cfg.tile_n % tile_n_step == 0):
        return False, f"tile_n must be a multiple of {tile_n_step} in [{tile_n_step}, 256] (WGMMA N), got {cfg.tile_n}"
    if cfg.tile_k not in TILE_K:
        return False, f"tile_k must be one of {TILE_K} for 16-bit inputs, got {cfg.tile_k}"
    accumulators = cfg.tile_m * cfg.tile_n // consumer_threads(cfg.schedule)
    if accumulators > MAX_ACCUMULATORS_PER_THREAD:
        return False, f"{accumulators} fp32 accumulators per thread exceed {MAX_ACCUMULATORS_PER_THREAD} (spills)"
    if cfg.cluster_m not in CLUSTER_DIMS or cfg.cluster_n not in CLUSTER_DIMS:
        return False, f"cluster dims must be in {CLUSTER_DIMS}, got {cfg.cluster_m}x{cfg.cluster_n}"
    if cfg.cluster_m * cfg.cluster_n > MAX_CLUSTER_SIZE:
        return False, f"cluster {cfg.cluster_m}x{cfg.cluster_n} exceeds the portable size {MAX_CLUSTER_SIZE}"
    if cfg.tile_n // cfg.cluster_m < MULTICAST_MIN_ROWS or cfg.tile_m // cfg.cluster_n < MULTICAST_MIN_ROWS:
        return False, (f"the multicast slices of a {cfg.tile_m}x{cfg.tile_n} tile over a {cfg.cluster_m}x"
                       f"{cfg.cluster_n} cluster are under {MULTICAST_MIN_ROWS} rows")
    if cfg.stages not in SPACE["stages"]:
        return False, f"stages must be 0 (auto) or in [2, {MAX_STAGES}], got {cfg.stages}"
    if cfg.splitk:
        return False, "split-K is the stream-K scheduler's runtime splits knob here; leave splitk empty"
    if cfg.epilogue not in EPILOGUES:
        return False, f"epilogue must be one of {tuple(EPILOGUES)}, got {cfg.epilogue!r}"
    if cfg.epilogue == "nosmem" and cfg.scheduler != "persistent":
        return False, "the no-smem epilogue is built with the persistent scheduler only"
    stages = cfg.stages or auto_stages(cfg)
    if stages < 2:
        return False, f"only {stages} pipeline stage fits in shared memory"
    smem = stages * stage_bytes(cfg) + epilogue_smem_bytes(cfg)
    if smem > SMEM_BYTES:
        return False, f"shared memory {smem} B for {stages} stages exceeds {SMEM_BYTES} B"
    return True, ""


def knob_grid(cfg: HgemmConfig, m: int, n: int, k: int) -> list[Knobs]:
    """Runtime knob variants the sweep times beyond the defaults, the same for every M x N x K: every swizzle x
    raster order, plus for stream-K kernels each decomposition of KNOB_STREAMK_SPLITS (default swizzle and raster)."""
    grid = [Knobs(swizzle=swizzle, raster=raster) for swizzle in KNOB_SWIZZLES for raster in KNOB_RASTERS]
    if cfg.scheduler == "streamk":
        grid += [Knobs(splits=splits) for splits in KNOB_STREAMK_SPLITS]
    return grid


def gemm_type(cfg: HgemmConfig) -> str:
    """The C++ type of the instantiation for `cfg`."""
    return (f"cudal2::sm90::TmaWsGemm<{ELEMENTS[cfg.dtype]}, {LAYOUT_CODES[cfg.layout]}, "
            f"{cfg.tile_m}, {cfg.tile_n}, {cfg.tile_k}, {cfg.cluster_m}, {cfg.cluster_n}, "
            f"cudal2::sm90::Schedule::{SCHEDULES[cfg.schedule]}, "
            f"cudal2::sm90::TileScheduler::{SCHEDULERS[cfg.scheduler]}, {cfg.stages}{template_tail(cfg)}>")


def template_tail(cfg: HgemmConfig) -> str:
    """The trailing template arguments that differ from their defaults (SwapAB, then EpilogueKind)."""
    if cfg.epilogue:
        return f", {str(cfg.swap_ab).lower()}, cudal2::sm90::EpilogueKind::{EPILOGUES[cfg.epilogue]}"
    return ", true" if cfg.swap_ab else ""


def render(cfg: HgemmConfig) -> str:
    """The `.cu` source of one kernel: the explicit instantiation and its C ABI export."""
    no_gdc = "#define CUDAL2_SM90_GDC 0  // CUTLASS 4.2's stream-K scheduler does not build with it\n"
    return (
        (no_gdc if cfg.scheduler == "streamk" else "")
        + '#include "cudal2/sm90_tma_ws.cuh"\n'
        "\n"
        f"template struct {gemm_type(cfg)};\n"
        f"using Gemm = {gemm_type(cfg)};\n"
        "\n"
        f'CUDAL2_EXPORT_KERNEL({cfg.name}, "{FAMILY}", 90, 90, '
        f"{DTYPE_CODES[cfg.dtype]}, {LAYOUT_CODES[cfg.layout]}, 1,\n"
        "                     Gemm::can_implement, Gemm::workspace_size, Gemm::launch)\n"
    )


def _config(dtype: str, layout: str, tile: tuple[int, int, int], cluster: tuple[int, int], schedule: str,
            scheduler: str, swap_ab: bool = False) -> HgemmConfig:
    return HgemmConfig(FAMILY, dtype, layout, *tile, stages=0, cluster_m=cluster[0], cluster_n=cluster[1],
                       schedule=schedule, scheduler=scheduler, swap_ab=swap_ab)


def default_configs() -> list[HgemmConfig]:
    """The always-built set (26 kernels): a large-tile cooperative kernel for every dtype and layout, plus a
    stream-K kernel (tail-heavy and small-MN/large-K shapes) and a pingpong kernel (small M) for each dtype on the
    nn.Linear layout and for fp16 on the matmul layout. For fp16 on both layouts, the standard strong Hopper
    configs for large square shapes (128x256 coop with a 1x2 cluster, 256x128 coop with a 2x1 cluster, 128x256
    stream-K, which evens out the last wave of tiles, e.g. 512 tiles on 132 SMs at 4096^3, and 64x256 pingpong with
    a 2x1 cluster, whose epilogue overlaps the other warpgroup's mainloop) and for mid shapes (128x128 pingpong with
    a 1x2 cluster). For LLM decode (M <= 64, nn.Linear layout), each dtype has swapped-operand kernels whose 64 or
    128 weight rows per tile stream through a deep TMA pipeline while M sits on WGMMA's narrow N side (16 or 32):
    on the H200 they matched or beat cuBLASLt-autotune on Llama-3-8B projections at M = 1..32 (e.g. 4096 x 4096 at
    M = 32: 12.1 us against 14.1 us) where the decode family's mma.sync kernels fell behind on large weights."""
    configs = [_config(dt, lay, (128, 256, 64), (2, 1), "coop", "persistent")
               for dt in ("fp16", "bf16") for lay in ("nn", "nt")]
    for dt, lay in (("fp16", "nt"), ("bf16", "nt"), ("fp16", "nn")):
        configs.append(_config(dt, lay, (128, 128, 64), (1, 1), "coop", "streamk"))
        configs.append(_config(dt, lay, (64, 128, 64), (1, 1), "pingpong", "persistent"))
    for lay in ("nt", "nn"):
        configs.append(_config("fp16", lay, (128, 256, 64), (1, 2), "coop", "persistent"))
        configs.append(_config("fp16", lay, (256, 128, 64), (2, 1), "coop", "persistent"))
        configs.append(_config("fp16", lay, (128, 128, 64), (1, 2), "pingpong", "persistent"))
        configs.append(_config("fp16", lay, (128, 256, 64), (2, 1), "coop", "streamk"))
        configs.append(_config("fp16", lay, (64, 256, 64), (2, 1), "pingpong", "persistent"))
    for dt in ("fp16", "bf16"):
        configs.append(_config(dt, "nt", (64, 16, 128), (1, 1), "pingpong", "persistent", swap_ab=True))
        configs.append(_config(dt, "nt", (64, 32, 128), (1, 1), "pingpong", "persistent", swap_ab=True))
        configs.append(_config(dt, "nt", (128, 16, 128), (1, 1), "coop", "persistent", swap_ab=True))
    return configs
