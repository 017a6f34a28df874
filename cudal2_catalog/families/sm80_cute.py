"""Family `sm80_cute`: CuTe multistage mma.sync GEMMs (cp.async + swizzled smem + ldmatrix, fp32 accumulation).

The A100 workhorse, also kept for small problems on H100 where lightweight kernels beat the TMA/WGMMA ones. The
device code lives in `csrc/include/cudal2/sm80_cute*.cuh`; a generated kernel is one `CUDAL2_SM80_CUTE_KERNEL`
instantiation. Compile-time parameters: tile_m x tile_n x tile_k, warps, stages, dtype, layout, and the split-K
policy `splitk` ("" = cluster reduction where available, "workspace" = always the workspace and a reduction kernel:
no cluster launch, for small problems where co-scheduling a cluster costs more than a second kernel). Runtime knobs:
`splits` (deterministic split-K: 2-8 parts reduce inside a thread-block cluster on sm_90, more parts or older GPUs
through the workspace; 0 = automatic, splitting K when the output tiles leave SMs idle), `swizzle` (CTA group size),
`raster` (1 = M, 2 = N);
`knob_grid` lists the variants the sweep times.

Code-level fields (structure of the generated mainloop and epilogue, not only its sizes), each at a default that
generates the code the family always had: `reg_pipeline` register fragment buffers (2: ldmatrix of k-block i+1 while
the MMAs of k-block i run; 1: load k-block i, then compute it; 3: two k-blocks ahead, BK=64 only), `smem_prefetch`
(K tiles the cp.async pipeline runs ahead, 1..stages-2; 0 = stages-1), `stagger_ab` (a tile's B copies issued one
k-block after its A copies, between the MMAs) and `epilogue` ("" = staged through swizzled shared memory, 128-bit
stores; "nosmem" = bias and 32-bit stores straight from the accumulator registers). Tiles need not be powers of two
(tile_m 48, 80, 96, 160, 192; tile_n 48, 96, 160, 192): residues in M and N are predicated, so a tile that does not
divide the problem runs its last row and column of tiles partly empty.
"""
from __future__ import annotations

import dataclasses
import math

from cudal2_catalog.config import HgemmConfig, Knobs

FAMILY = "sm80_cute"
SM_MIN, SM_MAX = 80, 90
TILE_K = (32, 64)
WARPS = (1, 2, 4, 8)
STAGES = range(2, 7)
# Opt-in dynamic shared memory per block (bytes) of every compute capability the binaries run on.
SMEM_LIMIT = {80: 163 * 1024, 86: 99 * 1024, 87: 163 * 1024, 89: 99 * 1024, 90: 227 * 1024}
ELEMENT = {"fp16": "cutlass::half_t", "bf16": "cutlass::bfloat16_t"}
SPLITK_POLICIES = {"": "kAuto", "workspace": "kWorkspace"}  # HgemmConfig.splitk -> SplitKPolicy in sm80_cute.cuh
EPILOGUES = {"": "kSmem", "nosmem": "kDirect"}  # HgemmConfig.epilogue -> Epilogue in sm80_cute_traits.cuh
MMA_M, MMA_N, MMA_K = 16, 16, 16  # per-warp step: one m16n8k16 atom along M, two along N
MAX_ACC_PER_THREAD = 128  # fp32 accumulators per thread beyond which registers spill
REG_PIPELINES = (1, 2, 3)  # register fragment buffers (k-blocks of ldmatrix fragments live at once)
# Code-level fields at HgemmConfig's defaults: the code the family always had (register double-buffering, cp.async
# stages-1 tiles ahead, A and B copies together, the epilogue staged through shared memory).
CODE_DEFAULTS = {f.name: f.default for f in dataclasses.fields(HgemmConfig)
                 if f.name in ("reg_pipeline", "smem_prefetch", "stagger_ab", "epilogue")}
MAX_REGISTERS = 255        # registers per thread an sm_80..sm_90 kernel may use
ADDRESS_REGISTERS = 64     # registers beside accumulators and fragments (addresses, predicates, loop state): the
#                            128x128x32 4-warp default (128 accumulators, 2 x 32 fragment registers) uses 255
KNOB_SWIZZLES = (4, 8)    # CTA group sizes along the raster dimension (the default 0 walks the whole dimension)
KNOB_RASTERS = (1, 2)     # consecutive CTAs along M (share B tiles), along N (share A tiles)
KNOB_SPLITS = (1, 2, 4, 8, 16, 32)  # split-K parts (1 = none; the default 0 is automatic), where K is the largest
MAX_SPLIT_CTAS = 1024     # split variants beyond this many CTAs (several waves on any GPU) are not timed

# Every value each HgemmConfig field can take in this family (feasible() decides which combinations build).
SPACE: dict[str, tuple] = {
    "dtype": tuple(ELEMENT),
    "layout": ("nn", "nt"),
    "tile_m": (16, 32, 48, 64, 80, 96, 128, 160, 192, 256),
    "tile_n": (16, 32, 48, 64, 96, 128, 160, 192, 256),
    "tile_k": TILE_K,
    "stages": tuple(STAGES),
    "cluster_m": (1,),
    "cluster_n": (1,),
    "schedule": ("",),
    "scheduler": ("",),
    "warps": WARPS,
    "swap_ab": (False,),
    "epilogue": tuple(EPILOGUES),
    "splitk": tuple(SPLITK_POLICIES),
    "reg_pipeline": REG_PIPELINES,
    "smem_prefetch": (0, *range(1, max(STAGES) - 1)),
    "stagger_ab": (False, True),
}
# Every value of each runtime knob (0 = default: automatic split-K, whole-dimension swizzle, raster along M).
KNOB_SPACE: dict[str, tuple] = {
    "splits": (0, 1, 2, 3, 4, 6, 8, 12, 16, 32),
    "swizzle": (0, 1, 2, 4, 8, 16),
    "raster": (0, 1, 2),
}


def warp_grid(cfg: HgemmConfig) -> tuple[int, int]:
    """Warps along M and N, as in GemmTraits: 2x2 for 4 warps; 2 and 8 warps spread along the longer tile side."""
    if cfg.warps in (1, 4):
        return (1, 1) if cfg.warps == 1 else (2, 2)
    along_n = cfg.tile_n >= cfg.tile_m
    wm = {2: 1 if along_n else 2, 8: 2 if along_n else 4}[cfg.warps]
    return wm, cfg.warps // wm


def n_atom_width(cfg: HgemmConfig) -> int:
    """Columns of the swizzled shared-memory atoms along N: the widest of 64, 32 and 16 that divides tile_n
    (kNAtomWidth in sm80_cute_traits.cuh)."""
    return next(width for width in (64, 32, 16) if cfg.tile_n % width == 0)


def smem_prefetch_depth(cfg: HgemmConfig) -> int:
    """K tiles the cp.async pipeline runs ahead: smem_prefetch, or stages-1 for its default 0."""
    return cfg.smem_prefetch or cfg.stages - 1


def estimated_registers(cfg: HgemmConfig) -> int:
    """A lower estimate of the registers per thread: fp32 accumulators, `reg_pipeline` k-blocks of A and B fragments
    (4 registers per 16x16 A step, 2 per 16x8 B atom of the warp tile) and ADDRESS_REGISTERS."""
    wm, wn = warp_grid(cfg)
    accumulators = cfg.tile_m * cfg.tile_n // (32 * cfg.warps)
    fragments = 4 * (cfg.tile_m // (MMA_M * wm)) + 2 * (cfg.tile_n // (8 * wn))
    return accumulators + cfg.reg_pipeline * fragments + ADDRESS_REGISTERS


def smem_bytes(cfg: HgemmConfig) -> int:
    """Dynamic shared memory: the operand pipeline, the output staging tile or the fp32 partial tile of the cluster
    split-K reduction, whichever is largest (they share it; GemmTraits::kSmemBytes)."""
    pipeline = cfg.stages * (cfg.tile_m + cfg.tile_n) * cfg.tile_k * 2
    epilogue = cfg.tile_m * cfg.tile_n * 2
    cluster_partial = cfg.tile_m * cfg.tile_n * 4
    return max(pipeline, epilogue, cluster_partial)


def feasible(cfg: HgemmConfig, arch: int) -> tuple[bool, str]:
    """Whether `cfg` builds and runs on compute capability `arch` (e.g. 80, 90); pure. Returns (ok, reason)."""
    if cfg.family != FAMILY:
        return False, f"family {cfg.family!r} is not {FAMILY}"
    if arch not in SMEM_LIMIT:
        return False, f"arch {arch} not one of {sorted(SMEM_LIMIT)}"
    if cfg.tile_k not in TILE_K:
        return False, f"tile_k {cfg.tile_k} not in {TILE_K}"
    if cfg.warps not in WARPS:
        return False, f"warps {cfg.warps} not in {WARPS}"
    if cfg.stages not in STAGES:
        return False, f"stages {cfg.stages} not in 2..6"
    if (cfg.cluster_m, cfg.cluster_n) != (1, 1) or cfg.schedule or cfg.scheduler or cfg.swap_ab:
        return False, "clusters, schedules, tile schedulers and swapped operands are sm90_tma_ws parameters"
    threads = 32 * cfg.warps
    wm, wn = warp_grid(cfg)
    if cfg.tile_m % (MMA_M * wm) or cfg.tile_n % (MMA_N * wn):
        return False, f"tile {cfg.tile_m}x{cfg.tile_n} not divisible by the {wm}x{wn} warp grid of 16x16 MMA steps"
    copy_rows_k = threads // (cfg.tile_k // 8)
    if cfg.tile_m % copy_rows_k:
        return False, f"tile_m {cfg.tile_m} not divisible by the {copy_rows_k} rows of the A copy"
    if cfg.layout == "nt" and cfg.tile_n % copy_rows_k:
        return False, f"tile_n {cfg.tile_n} not divisible by the {copy_rows_k} rows of the K-major B copy"
    copy_rows_n = threads // (n_atom_width(cfg) // 8)
    if cfg.layout == "nn" and cfg.tile_k % copy_rows_n:
        return False, f"tile_k {cfg.tile_k} not divisible by the {copy_rows_n} K rows of the N-major B copy"
    acc = cfg.tile_m * cfg.tile_n // threads
    if acc > MAX_ACC_PER_THREAD:
        return False, f"{acc} fp32 accumulators per thread (> {MAX_ACC_PER_THREAD}) would spill"
    limit = SMEM_LIMIT[arch]
    if smem_bytes(cfg) > limit:
        return False, f"shared memory {smem_bytes(cfg)} B exceeds {limit} B on sm{arch}"
    code_problem = code_fields_problem(cfg)
    if code_problem:
        return False, code_problem
    for field in ("tile_m", "tile_n", "epilogue", "splitk"):
        if getattr(cfg, field) not in SPACE[field]:
            return False, f"{field} {getattr(cfg, field)!r} not in {SPACE[field]}"
    return True, ""


def code_fields_problem(cfg: HgemmConfig) -> str:
    """Why the code-level fields (reg_pipeline, smem_prefetch, stagger_ab) of `cfg` cannot be generated, or ""."""
    k_blocks = cfg.tile_k // MMA_K
    if cfg.reg_pipeline not in REG_PIPELINES:
        return f"reg_pipeline {cfg.reg_pipeline} not in {REG_PIPELINES}"
    if cfg.reg_pipeline > k_blocks:
        return (f"reg_pipeline {cfg.reg_pipeline} needs as many k-blocks per tile; tile_k {cfg.tile_k} has {k_blocks} "
                f"of {MMA_K}")
    if cfg.reg_pipeline > CODE_DEFAULTS["reg_pipeline"] and estimated_registers(cfg) > MAX_REGISTERS:
        return (f"reg_pipeline {cfg.reg_pipeline}: about {estimated_registers(cfg)} registers per thread "
                f"(> {MAX_REGISTERS}) would spill")
    if cfg.smem_prefetch and not 1 <= cfg.smem_prefetch <= cfg.stages - 2:
        return (f"smem_prefetch {cfg.smem_prefetch} must be 1..stages-2 = {cfg.stages - 2} (0 = stages-1, the "
                "deepest the stages allow)")
    return ""


def knob_grid(cfg: HgemmConfig, m: int, n: int, k: int) -> list[Knobs]:
    """Runtime knob variants the sweep times beyond the defaults (automatic split-K) for an M x N x K problem: every
    swizzle group x raster order, plus split-K in KNOB_SPLITS parts when K >= max(M, N) (few output tiles for much K
    work), up to the number of K tiles (the kernel clamps larger values to it) and MAX_SPLIT_CTAS CTAs."""
    grid = [Knobs(swizzle=group, raster=raster) for group in KNOB_SWIZZLES for raster in KNOB_RASTERS]
    if k >= max(m, n):
        tiles = math.ceil(m / cfg.tile_m) * math.ceil(n / cfg.tile_n)
        grid += [Knobs(splits=splits) for splits in KNOB_SPLITS
                 if splits <= math.ceil(k / cfg.tile_k) and tiles * splits <= MAX_SPLIT_CTAS]
    return grid


def has_code_fields(cfg: HgemmConfig) -> bool:
    """Whether `cfg` sets a code-level field (reg_pipeline, smem_prefetch, stagger_ab, epilogue) off its default."""
    return any(getattr(cfg, field) != default for field, default in CODE_DEFAULTS.items())


def render(cfg: HgemmConfig) -> str:
    """The body of `kernels/sm80/<name>.cu`: one instantiation macro of sm80_cute.cuh (CUDAL2_SM80_CUTE_KERNEL; its
    _SPLITK form for a split-K policy; its _CODE form for code-level fields off their defaults)."""
    macro, extra = "CUDAL2_SM80_CUTE_KERNEL", ""
    if has_code_fields(cfg):
        macro = "CUDAL2_SM80_CUTE_KERNEL_CODE"
        extra = (f", {SPLITK_POLICIES[cfg.splitk]}, /*REG_PIPELINE=*/{cfg.reg_pipeline}, "
                 f"/*SMEM_PREFETCH=*/{smem_prefetch_depth(cfg)}, /*STAGGER_AB=*/{str(cfg.stagger_ab).lower()}, "
                 f"{EPILOGUES[cfg.epilogue]}")
    elif cfg.splitk:
        macro, extra = "CUDAL2_SM80_CUTE_KERNEL_SPLITK", f", {SPLITK_POLICIES[cfg.splitk]}"
    return (
        '#include "cudal2/sm80_cute.cuh"\n'
        "\n"
        f"{macro}({cfg.name}, {ELEMENT[cfg.dtype]}, /*B_N_MAJOR=*/{str(cfg.layout == 'nn').lower()}, "
        f"{cfg.tile_m}, {cfg.tile_n}, {cfg.tile_k}, {cfg.warps}, {cfg.stages}{extra})\n"
    )


# (tile_m, tile_n, tile_k, warps, stages): small, medium, a wide tile for larger N, and a 2-warp 32x64 tile for
# problems with M or N of 64..512, whose 64x64 tiles leave most SMs idle (4x the CTAs, at 64 threads each).
DEFAULT_SHAPES = ((64, 64, 64, 4, 3), (64, 128, 64, 4, 3), (128, 128, 32, 4, 4), (32, 64, 64, 2, 4))


# One kernel per off-default code-level value (and tiles that are not powers of two), over both dtypes and layouts:
# named candidates for the GPU tests and the `candidates` stage of scripts/gpu_check.sh, never built by default.
CODE_VARIANTS = (
    "sm80_cute_fp16_nt_64x64x64_s3_w4_r1", "sm80_cute_bf16_nn_64x128x64_s3_w4_r3",
    "sm80_cute_fp16_nn_64x64x64_s4_w4_p1", "sm80_cute_bf16_nt_64x64x64_s4_w4_p2",
    "sm80_cute_fp16_nt_32x64x64_s5_w2_p3", "sm80_cute_bf16_nn_64x64x64_s6_w4_p4",
    "sm80_cute_fp16_nt_64x128x64_s3_w4_stagger", "sm80_cute_bf16_nn_64x64x32_s4_w4_stagger",
    "sm80_cute_fp16_nn_64x64x32_s4_w4_r1_stagger", "sm80_cute_fp16_nt_64x64x64_s3_w4_nosmem",
    "sm80_cute_bf16_nn_32x64x64_s4_w2_nosmem", "sm80_cute_fp16_nt_64x64x64_s4_w4_nosmem_r3_p2_stagger",
    "sm80_cute_fp16_nn_160x64x32_s3_w4", "sm80_cute_bf16_nt_64x96x64_s3_w4", "sm80_cute_fp16_nn_48x96x64_s4_w2",
)


def default_configs() -> list[HgemmConfig]:
    """The always-built set: four tiles for every dtype and layout (16 kernels), all feasible on sm80 and sm90."""
    return [HgemmConfig(family=FAMILY, dtype=dtype, layout=layout, tile_m=tm, tile_n=tn, tile_k=tk, warps=w, stages=s)
            for dtype in ("fp16", "bf16") for layout in ("nn", "nt") for tm, tn, tk, w, s in DEFAULT_SHAPES]
