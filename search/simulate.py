"""A simulated GPU backend: a cost model of each kernel family so that the whole search runs on a CPU.

Time of a config on M x N x K = launch floor + max(tensor-core time, DRAM time, L2 time) + split-K reduction, where
tensor-core time counts waves of CTA tiles (wave quantization) at a per-SM throughput that depends on the family
(WGMMA vs mma.sync), tile shape, pipeline depth and warps; DRAM time counts operand re-reads (multicast clusters,
swizzle and raster order for L2 reuse). Every figure carries seeded multiplicative noise. A few points fail on
purpose, by hash: builds that do not compile, kernels that crash, and kernels that compute wrong results. The
cuBLASLt baseline is the best of a fixed, hidden set of configs at its own knobs (a heuristic library; times the
constant `baseline_scale`). A candidate
that cannot be built for the simulated GPU's arch (the family's feasibility check, or an sm90 source on sm80) fails
to compile, as nvcc would. The arch-80 constants are an A100 SXM4's, roughly (ANALYTIC_GPUS); the arch-90 ones
started as an H100 SXM's (ANALYTIC_GPUS[90]) and are fitted to real H200 and H100 measurements (CALIBRATED_SM90).
What that buys and what it does not: on held-out problems the calibrated model ranks the built kernels at their
knobs at a mean Spearman of 0.46-0.75 against the real sweeps (the hand-set constants 0.41-0.50; two real sweeps
agree at 0.92-0.93), but not the configs a search explores beyond them (0.2-0.3 either way), and no simulated speedup
is a real one (search/README.md, "What the simulator may be cited for").
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
import time
from typing import Any, Iterator, NamedTuple

from search.backend import CompileOutcome
from search.candidate import COMPILE_ERROR, CRASH, INCORRECT, OK, UNSUPPORTED, Candidate, EvalResult, Problem
from cudal2_catalog.codegen import default_configs, feasible
from search.compile_farm import source_arch_dir
from cudal2_catalog.config import HgemmConfig
from cudal2_catalog.families import sm90_tma_ws

ANALYTIC_LAUNCH_US = {"sm90_tma_ws": 3.2, "sm80_cute": 2.6, "decode": 2.4, "tiny": 2.0}
TEST_CASES = 3                 # timed repetitions of each problem (the reward averages their speedups)
NOISE = 0.015                  # relative standard deviation of one timing
COMPILE_FAIL_EVERY = 41        # about one build in this many fails to compile
CRASH_EVERY = 151              # about one (candidate, problem) in this many crashes
WRONG_EVERY = 97               # about one candidate in this many computes wrong results


def _sm90_kernel(tile: tuple[int, int, int], cluster: tuple[int, int], schedule: str, scheduler: str) -> HgemmConfig:
    return HgemmConfig("sm90_tma_ws", "fp16", "nt", *tile, cluster_m=cluster[0], cluster_n=cluster[1],
                       schedule=schedule, scheduler=scheduler)


def _sm80_kernel(tile_m: int, tile_n: int, tile_k: int, warps: int, stages: int) -> HgemmConfig:
    return HgemmConfig("sm80_cute", "fp16", "nt", tile_m, tile_n, tile_k, stages=stages, warps=warps)


@dataclasses.dataclass(frozen=True)
class ModelConstants:
    """The cost model's constants besides the GPU's throughputs (defaults: the analytic model's guesses)."""

    launch_us: dict[str, float] = dataclasses.field(default_factory=lambda: dict(ANALYTIC_LAUNCH_US))
    intensity_exponent: float = 0.6  # per-SM efficiency ~ (tile intensity / a 128x256 tile's) ** this
    warps_exponent: float = 0.35     # ... ~ (warps / 4) ** this below 4 warps
    pingpong_short_k: float = 1.06   # sm90 pingpong efficiency factor at K <= 2048 (epilogue hidden) ...
    pingpong_long_k: float = 0.98    # ... and above
    swap_ab: float = 1.0             # efficiency factor of swap-A/B kernels
    streamk_fixup: float = 1.08      # stream-K's partial-tile fix-up cost factor
    l2_miss: float = 0.35            # DRAM re-read share of a problem larger than L2 at swizzle 1
    raster_miss: float = 0.2         # extra re-read share of the non-preferred raster order
    reduce_us: float = 2.0           # split-K reduction: fixed cost ...
    reduce_passes: float = 8.0       # ... plus this many bytes per output element and split over DRAM
    baseline_scale: float = 1.0      # the simulated cuBLASLt's time: its best kernel's times this


@dataclasses.dataclass(frozen=True)
class SimGpu:
    """The constants of one simulated GPU (rough figures of the real part, or fitted to its measurements)."""

    name: str
    arch: int
    sm_count: int
    sm_tflops: float                 # dense fp16 tensor TFLOP/s per SM at the fastest tensor-core path's peak
    dram_bytes_per_us: float         # achievable HBM bandwidth
    l2_bytes_per_us: float
    l2_bytes: int
    family_peak: dict[str, float]    # the share of sm_tflops each family's kernels reach (families it runs)
    baseline: tuple[HgemmConfig, ...]  # the simulated cuBLASLt's kernels (dtype and layout follow the problem)
    model: ModelConstants = dataclasses.field(default_factory=ModelConstants)


def parameters(gpu: SimGpu) -> dict[str, float]:
    """Every fittable constant of `gpu` by flat name: the throughputs, `peak.<family>`, `launch_us.<family>` and
    the ModelConstants fields."""
    model = dataclasses.asdict(gpu.model)
    out = {"sm_tflops": gpu.sm_tflops, "dram_bytes_per_us": gpu.dram_bytes_per_us,
           "l2_bytes_per_us": gpu.l2_bytes_per_us}
    out.update({f"peak.{family}": value for family, value in gpu.family_peak.items()})
    launch = model.pop("launch_us")
    out.update({f"launch_us.{family}": launch[family] for family in gpu.family_peak})
    out.update(model)
    return out


def with_parameters(gpu: SimGpu, values: dict[str, float], name: str | None = None) -> SimGpu:
    """`gpu` with the constants `values` names (flat names of `parameters`) replaced; ValueError for a name that
    is none of them."""
    unknown = set(values) - set(parameters(gpu))
    if unknown:
        raise ValueError(f"unknown simulator constants {sorted(unknown)}; known: {sorted(parameters(gpu))}")
    peak = {f: values.get(f"peak.{f}", p) for f, p in gpu.family_peak.items()}
    launch = {**gpu.model.launch_us, **{f: values[f"launch_us.{f}"] for f in peak if f"launch_us.{f}" in values}}
    fields = {f.name for f in dataclasses.fields(ModelConstants)} - {"launch_us"}
    model = dataclasses.replace(gpu.model, launch_us=launch, **{k: v for k, v in values.items() if k in fields})
    top = {k: v for k, v in values.items() if k in ("sm_tflops", "dram_bytes_per_us", "l2_bytes_per_us")}
    return dataclasses.replace(gpu, name=name or gpu.name, family_peak=peak, model=model, **top)


ANALYTIC_GPUS = {
    90: SimGpu("Simulated H100 SXM", 90, 132, sm_tflops=7.5, dram_bytes_per_us=3.0e6, l2_bytes_per_us=9.0e6,
               l2_bytes=50 * 2**20, family_peak={"sm90_tma_ws": 0.88, "sm80_cute": 0.55, "decode": 0.40, "tiny": 0.40},
               baseline=(_sm90_kernel((128, 256, 64), (2, 1), "coop", "persistent"),
                         _sm90_kernel((256, 128, 64), (1, 2), "coop", "persistent"),
                         _sm90_kernel((128, 128, 64), (1, 1), "coop", "persistent"),
                         _sm90_kernel((64, 128, 64), (1, 1), "pingpong", "persistent"),
                         _sm90_kernel((128, 128, 64), (1, 1), "coop", "streamk"),
                         _sm90_kernel((64, 256, 64), (1, 1), "pingpong", "persistent"))),
    # mma.sync is the A100's native path (312 TFLOP/s over 108 SMs); cuBLASLt's Ampere kernels as sm80_cute tiles.
    80: SimGpu("Simulated A100-SXM4-80GB", 80, 108, sm_tflops=2.9, dram_bytes_per_us=1.9e6, l2_bytes_per_us=5.5e6,
               l2_bytes=40 * 2**20, family_peak={"sm80_cute": 0.80, "decode": 0.58, "tiny": 0.58},
               baseline=(_sm80_kernel(256, 128, 32, 8, 3), _sm80_kernel(128, 256, 32, 8, 3),
                         _sm80_kernel(128, 128, 32, 4, 5), _sm80_kernel(128, 64, 32, 4, 6),
                         _sm80_kernel(64, 64, 64, 4, 3))),
}
# The arch-90 constants fitted to real H200 and H100 measurements (the committed H200 search store and the H200/H100
# sweeps) by `python -m studies.simulator_calibration`; the fit, and the model's rank correlation with real kernels
# on held-out problems before and after it: benchmarks/results/simulated/simulator_calibration_2026-11-25.md.
CALIBRATED_SM90 = {"sm_tflops": 5.25, "dram_bytes_per_us": 4.32e6, "l2_bytes_per_us": 1.08e7,
                   "peak.sm90_tma_ws": 0.748, "peak.sm80_cute": 0.3927, "peak.decode": 0.28,
                   "launch_us.sm90_tma_ws": 3.84, "launch_us.sm80_cute": 1.82, "launch_us.decode": 2.016,
                   "intensity_exponent": 0.51, "warps_exponent": 0.245, "pingpong_short_k": 1.272,
                   "pingpong_long_k": 0.98, "swap_ab": 1.44, "streamk_fixup": 1.08, "l2_miss": 0.2975,
                   "raster_miss": 0.14, "reduce_us": 1.7, "reduce_passes": 11.42, "baseline_scale": 0.85}
SIM_GPUS = {**ANALYTIC_GPUS, 90: with_parameters(ANALYTIC_GPUS[90], CALIBRATED_SM90)}


def unbuildable(cand: Candidate, arch: int) -> str:
    """Why `cand` cannot be built for compute capability `arch` (empty when it can): a config the family's check
    rejects there, or an sm90 source (WGMMA/TMA) on another arch."""
    if cand.config:
        return feasible(HgemmConfig.from_name(cand.config), arch)[1]
    if arch != 90 and source_arch_dir(cand.source) == "sm90":
        return f"an sm90 source (WGMMA/TMA) has no target on sm{arch}"
    return ""


def _compiles(seed: int, cand: Candidate, arch: int) -> CompileOutcome:
    """The simulated build of a candidate for `arch`: one that cannot be built there fails with the reason; about
    one in COMPILE_FAIL_EVERY fails with a ptxas-like log; sources must export the kernel C ABI."""
    key = cand.build_key
    if why := unbuildable(cand, arch):
        return CompileOutcome(False, log=f"error: {key} does not build for sm{arch}: {why}", seconds=1.0)
    if cand.source and "CUDAL2_EXPORT_KERNEL" not in cand.source:
        return CompileOutcome(False, log="error: the source does not export a kernel (CUDAL2_EXPORT_KERNEL missing)",
                              seconds=1.0)
    if _unit_hash(seed, "compile", key) < 1 / COMPILE_FAIL_EVERY:
        return CompileOutcome(False, log=f"ptxas error: simulated failure building {key}", seconds=30.0)
    return CompileOutcome(True, artifact=f"sim://{key}.so", seconds=40.0)


def _unit_hash(*parts: Any) -> float:
    """A deterministic number in [0, 1) from `parts`."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") / 2**64


def _noise(*parts: Any) -> float:
    """A seeded multiplicative timing noise factor (about 1 +- NOISE)."""
    u1, u2 = max(_unit_hash(*parts, 1), 1e-12), _unit_hash(*parts, 2)
    return math.exp(NOISE * math.sqrt(-2 * math.log(u1)) * math.cos(2 * math.pi * u2))


def _stages(cfg: HgemmConfig) -> int:
    if cfg.stages:
        return cfg.stages
    if cfg.family == "sm90_tma_ws":
        return sm90_tma_ws.auto_stages(cfg)
    return 3


def _auto_splits(cfg: HgemmConfig, tiles: int, k: int, sm_count: int) -> int:
    """The split count a kernel picks with splits = 0 on `sm_count` SMs."""
    k_tiles = math.ceil(k / cfg.tile_k)
    if cfg.family == "decode":
        return max(1, min(k_tiles, sm_count // max(tiles, 1)))
    if cfg.family == "sm80_cute" and tiles < sm_count // 2:
        return max(1, min(8, k_tiles, sm_count // tiles))
    if cfg.family == "tiny":  # cluster parts of >= 128 of K (sm_90 only: model_terms runs it unsplit before)
        return max(1, min(16, k_tiles, k // 128, sm_count // tiles))
    return 1


class ModelTerms(NamedTuple):
    """The parts of one simulated time (us): `total` = launch + max(compute, dram, l2) + reduce; `waves` of CTA
    tiles (split-K parts included) over the SMs and the per-SM efficiency `eff` the compute time assumed."""

    launch: float
    compute: float
    dram: float
    l2: float
    reduce: float
    waves: int
    eff: float

    @property
    def total(self) -> float:
        """The simulated time (us)."""
        return self.launch + max(self.compute, self.dram, self.l2) + self.reduce


def model_terms(cfg: HgemmConfig, knobs: tuple[int, int, int], m: int, n: int, k: int, gpu: SimGpu) -> ModelTerms:
    """The noise-free terms of the simulated time of `cfg` with runtime `knobs` on an M x N x K problem on `gpu`."""
    splits, swizzle, raster = knobs
    rows, cols = (n, m) if cfg.swap_ab else (m, n)
    tiles_m = math.ceil(math.ceil(rows / cfg.tile_m) / cfg.cluster_m) * cfg.cluster_m
    tiles_n = math.ceil(math.ceil(cols / cfg.tile_n) / cfg.cluster_n) * cfg.cluster_n
    tiles = tiles_m * tiles_n
    # Per-SM throughput: tile arithmetic intensity, pipeline depth, tile_k, latency hiding by warps.
    intensity = (cfg.tile_m * cfg.tile_n / (cfg.tile_m + cfg.tile_n)) / (128 * 256 / 384)
    c = gpu.model
    eff = gpu.family_peak[cfg.family] * min(1.0, intensity) ** c.intensity_exponent
    eff *= 1 - 0.5 ** (_stages(cfg) - 0.5)
    eff *= {32: 0.9, 64: 1.0, 128: 0.97, 256: 0.93}[cfg.tile_k]
    if cfg.warps:
        eff *= min(1.0, cfg.warps / 4) ** c.warps_exponent
    if cfg.family == "sm90_tma_ws" and cfg.schedule == "pingpong":
        eff *= c.pingpong_short_k if k <= 2048 else c.pingpong_long_k  # epilogue behind the other warpgroup
    if cfg.swap_ab:
        eff *= c.swap_ab
    if cfg.scheduler == "streamk":
        parts = max(1, splits) if splits else 0
        work = tiles * math.ceil(k / cfg.tile_k)
        if parts:
            waves = math.ceil(tiles * parts / gpu.sm_count)
            k_share = k / parts
        else:  # automatic: K iterations spread evenly over the SMs
            waves, k_share = 1, math.ceil(work / gpu.sm_count) * cfg.tile_k
        fixup = c.streamk_fixup
    else:
        parts = splits if (splits and cfg.family != "sm90_tma_ws") else _auto_splits(cfg, tiles, k, gpu.sm_count)
        if cfg.family == "tiny":  # K parts reduce in a cluster of at most 16 CTAs, on sm_90 only
            parts = min(parts, 16) if gpu.arch >= 90 else 1
        parts = min(parts, math.ceil(k / cfg.tile_k))
        waves = math.ceil(tiles * parts / gpu.sm_count)
        k_share, fixup = k / parts, 1.0
    tile_us = 2 * cfg.tile_m * cfg.tile_n * k_share / (gpu.sm_tflops * 1e6 * eff)
    compute_us = waves * tile_us * fixup
    # Memory: operand re-reads through L2 (multicast halves them per cluster dim), DRAM misses by traversal order.
    l2_bytes = 2 * (rows * k * tiles_n / cfg.cluster_n + cols * k * tiles_m / cfg.cluster_m) + 2 * m * n
    unique = 2 * (m * k + n * k + m * n)
    preferred = 2 if cols >= rows else 1
    miss = 0.0 if unique < gpu.l2_bytes else c.l2_miss / (1 + math.log2(max(swizzle, 1)))
    if raster and raster != preferred:
        miss += c.raster_miss
    dram_us = unique * (1 + miss) / gpu.dram_bytes_per_us
    reduce_us = 0.0
    if parts > 1 and cfg.scheduler != "streamk":
        reduce_us = c.reduce_us + c.reduce_passes * m * n * parts / gpu.dram_bytes_per_us
    return ModelTerms(c.launch_us[cfg.family], compute_us, dram_us, l2_bytes / gpu.l2_bytes_per_us, reduce_us, waves,
                      eff)


def model_us(cfg: HgemmConfig, knobs: tuple[int, int, int], m: int, n: int, k: int, gpu: SimGpu) -> float:
    """The noise-free simulated time (us) of `cfg` with runtime `knobs` on an M x N x K problem on `gpu`."""
    return model_terms(cfg, knobs, m, n, k, gpu).total


def baseline_model_us(problem: Problem, gpu: SimGpu) -> float:
    """The noise-free simulated cuBLASLt-autotune time on `gpu`: the best of its baseline kernels at its preferred
    knobs (times `baseline_scale`)."""
    best = math.inf
    for kernel in gpu.baseline:
        cfg = dataclasses.replace(kernel, dtype=problem.dtype, layout=problem.layout)
        knobs = (0, 2, 2 if problem.n >= problem.m else 1)
        best = min(best, model_us(cfg, knobs, problem.m, problem.n, problem.k, gpu))
    return best * gpu.model.baseline_scale


@dataclasses.dataclass
class SimulatedBackend:
    """The backend protocol over the cost model of the GPU of compute capability `arch` (SIM_GPUS: 90 an H100 SXM
    calibrated on real sm90 measurements, 80 an A100 SXM4; `analytic`: the hand-set constants of ANALYTIC_GPUS).
    `eval_delay_s` sleeps per evaluation (to test interruption). Compiles and verdicts are pure functions of (seed,
    arch, constants, candidate, problem), so any instance agrees with a store."""

    seed: int = 0
    eval_delay_s: float = 0.0
    arch: int = 90
    analytic: bool = False

    def __post_init__(self) -> None:
        if self.arch not in SIM_GPUS:
            raise ValueError(f"the simulated backend models sm{' and sm'.join(map(str, SIM_GPUS))}, not sm{self.arch}")

    @property
    def gpu(self) -> SimGpu:
        """The simulated GPU's constants."""
        return (ANALYTIC_GPUS if self.analytic else SIM_GPUS)[self.arch]

    def environment(self) -> dict[str, Any]:
        """The simulated GPU."""
        return {"gpu_name": self.gpu.name, "arch": self.arch, "capability": [self.arch // 10, self.arch % 10],
                "sm_count": self.gpu.sm_count, "driver": "simulated", "cuda": "simulated", "simulated": True}

    def prebuilt(self) -> set[str]:
        """The default kernel set's kernels that build for the arch, as if built into the extension."""
        return {cfg.name for cfg in default_configs() if feasible(cfg, self.arch)[0]}

    def compile(self, candidates: list[Candidate]) -> dict[str, CompileOutcome]:
        """Simulated builds (deterministic per build key, so a resumed run's backend agrees with the store)."""
        return {cand.build_key: _compiles(self.seed, cand, self.arch) for cand in candidates}

    def evaluate(self, requests: list[tuple[Candidate, Problem]]) -> list[EvalResult]:
        """Simulated checks and timings of each request."""
        return [result for _, result in self.evaluate_iter(requests)]

    def evaluate_iter(self, requests: list[tuple[Candidate, Problem]]) -> Iterator[tuple[int, EvalResult]]:
        """(request index, verdict) of each request as it is simulated, one by one."""
        for index, (cand, problem) in enumerate(requests):
            if self.eval_delay_s:
                time.sleep(self.eval_delay_s)
            yield index, self._evaluate_one(cand, problem)

    def _evaluate_one(self, cand: Candidate, problem: Problem) -> EvalResult:
        gpu = self.environment()
        build = _compiles(self.seed, cand, self.arch)
        if not build.ok:
            return EvalResult(COMPILE_ERROR, reason=build.log, gpu=gpu)
        if _unit_hash(self.seed, "crash", cand.id, problem.key) < 1 / CRASH_EVERY:
            return EvalResult(CRASH, reason="simulated: illegal memory access (worker died)", gpu=gpu)
        if _unit_hash(self.seed, "wrong", cand.id) < 1 / WRONG_EVERY:
            return EvalResult(INCORRECT, max_rel_err=0.5, reason="simulated: random check max rel err 0.5", gpu=gpu)
        m, n, k = problem.m, problem.n, problem.k
        base = baseline_model_us(problem, self.gpu)
        if cand.source:
            model = base * 1.2
        else:
            cfg = HgemmConfig.from_name(cand.config)
            if cfg.family == "decode" and m > 256:
                return EvalResult(UNSUPPORTED, reason="decode kernels take M <= 256", gpu=gpu)
            model = model_us(cfg, cand.knobs, m, n, k, self.gpu)
        case_us = [model * _noise(self.seed, cand.id, problem.key, case) for case in range(TEST_CASES)]
        case_base = [base * _noise(self.seed, "baseline", problem.key, case) for case in range(TEST_CASES)]
        case_us.sort()
        case_base.sort()
        return EvalResult(OK, us=case_us[TEST_CASES // 2], baseline_us=case_base[TEST_CASES // 2],
                          case_speedups=[b / c for b, c in zip(case_base, case_us)],
                          max_rel_err=2e-4 * (1 + cand.knobs[0]), gpu=gpu, eval_s=0.05)

    def close(self) -> None:
        """Nothing to release."""
