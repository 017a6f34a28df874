"""A simulated GPU backend: an analytic cost model of each kernel family so that the whole search runs on a CPU.

Time of a config on M x N x K = launch floor + max(tensor-core time, DRAM time, L2 time) + split-K reduction, where
tensor-core time counts waves of CTA tiles (wave quantization) at a per-SM throughput that depends on the family
(WGMMA vs mma.sync), tile shape, pipeline depth and warps; DRAM time counts operand re-reads (multicast clusters,
swizzle and raster order for L2 reuse). Every figure carries seeded multiplicative noise. A few points fail on
purpose, by hash: builds that do not compile, kernels that crash, and kernels that compute wrong results. The
cuBLASLt baseline is the best of a fixed, hidden set of configs at its own knobs (a heuristic library).
Constants are an H100 SXM's, roughly; the model ranks kernels plausibly, it does not predict real times.
"""
from __future__ import annotations

import dataclasses
import hashlib
import math
import time
from typing import Any

from search.backend import CompileOutcome
from search.candidate import COMPILE_ERROR, CRASH, INCORRECT, OK, UNSUPPORTED, Candidate, EvalResult, Problem
from search.codegen import default_configs
from search.config import HgemmConfig
from search.families import sm90_tma_ws

SM_COUNT = 132
SM_TFLOPS = 7.5                # dense fp16 tensor TFLOP/s per SM at WGMMA peak
DRAM_BYTES_PER_US = 3.0e6      # achievable HBM bandwidth (3 TB/s)
L2_BYTES_PER_US = 9.0e6
L2_BYTES = 50 * 2**20
FAMILY_PEAK = {"sm90_tma_ws": 0.88, "sm80_cute": 0.55, "decode": 0.40}   # fraction of WGMMA peak
LAUNCH_US = {"sm90_tma_ws": 3.2, "sm80_cute": 2.6, "decode": 2.4}
TEST_CASES = 3                 # timed repetitions of each problem (the reward averages their speedups)
NOISE = 0.015                  # relative standard deviation of one timing
COMPILE_FAIL_EVERY = 41        # about one build in this many fails to compile
CRASH_EVERY = 151              # about one (candidate, problem) in this many crashes
WRONG_EVERY = 97               # about one candidate in this many computes wrong results
# The simulated cuBLASLt's kernels (heuristic: the best of them at its preferred knobs).
BASELINE_TILES = (((128, 256, 64), (2, 1), "coop", "persistent"), ((256, 128, 64), (1, 2), "coop", "persistent"),
                  ((128, 128, 64), (1, 1), "coop", "persistent"), ((64, 128, 64), (1, 1), "pingpong", "persistent"),
                  ((128, 128, 64), (1, 1), "coop", "streamk"), ((64, 256, 64), (1, 1), "pingpong", "persistent"))


def _compiles(seed: int, cand: Candidate) -> CompileOutcome:
    """The simulated build of a candidate: about one in COMPILE_FAIL_EVERY fails with a ptxas-like log; sources
    must export the kernel C ABI."""
    key = cand.build_key
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


def _auto_splits(cfg: HgemmConfig, tiles: int, k: int) -> int:
    """The split count a kernel picks with splits = 0."""
    k_tiles = math.ceil(k / cfg.tile_k)
    if cfg.family == "decode":
        return max(1, min(k_tiles, SM_COUNT // max(tiles, 1)))
    if cfg.family == "sm80_cute" and tiles < SM_COUNT // 2:
        return max(1, min(8, k_tiles, SM_COUNT // tiles))
    return 1


def model_us(cfg: HgemmConfig, knobs: tuple[int, int, int], m: int, n: int, k: int) -> float:
    """The noise-free simulated time (us) of `cfg` with runtime `knobs` on an M x N x K problem."""
    splits, swizzle, raster = knobs
    rows, cols = (n, m) if cfg.swap_ab else (m, n)
    tiles_m = math.ceil(math.ceil(rows / cfg.tile_m) / cfg.cluster_m) * cfg.cluster_m
    tiles_n = math.ceil(math.ceil(cols / cfg.tile_n) / cfg.cluster_n) * cfg.cluster_n
    tiles = tiles_m * tiles_n
    # Per-SM throughput: tile arithmetic intensity, pipeline depth, tile_k, latency hiding by warps.
    intensity = (cfg.tile_m * cfg.tile_n / (cfg.tile_m + cfg.tile_n)) / (128 * 256 / 384)
    eff = FAMILY_PEAK[cfg.family] * min(1.0, intensity) ** 0.6
    eff *= 1 - 0.5 ** (_stages(cfg) - 0.5)
    eff *= {32: 0.9, 64: 1.0, 128: 0.97, 256: 0.93}[cfg.tile_k]
    if cfg.warps:
        eff *= min(1.0, cfg.warps / 4) ** 0.35
    if cfg.family == "sm90_tma_ws" and cfg.schedule == "pingpong":
        eff *= 1.06 if k <= 2048 else 0.98   # epilogue hidden behind the other warpgroup's mainloop
    if cfg.scheduler == "streamk":
        parts = max(1, splits) if splits else 0
        work = tiles * math.ceil(k / cfg.tile_k)
        if parts:
            waves = math.ceil(tiles * parts / SM_COUNT)
            k_share = k / parts
        else:  # automatic: K iterations spread evenly over the SMs
            waves, k_share = 1, math.ceil(work / SM_COUNT) * cfg.tile_k
        fixup = 1.08
    else:
        parts = splits if (splits and cfg.family != "sm90_tma_ws") else _auto_splits(cfg, tiles, k)
        parts = min(parts, math.ceil(k / cfg.tile_k))
        waves = math.ceil(tiles * parts / SM_COUNT)
        k_share, fixup = k / parts, 1.0
    tile_us = 2 * cfg.tile_m * cfg.tile_n * k_share / (SM_TFLOPS * 1e6 * eff)
    compute_us = waves * tile_us * fixup
    # Memory: operand re-reads through L2 (multicast halves them per cluster dim), DRAM misses by traversal order.
    l2_bytes = 2 * (rows * k * tiles_n / cfg.cluster_n + cols * k * tiles_m / cfg.cluster_m) + 2 * m * n
    unique = 2 * (m * k + n * k + m * n)
    preferred = 2 if cols >= rows else 1
    miss = 0.0 if unique < L2_BYTES else 0.35 / (1 + math.log2(max(swizzle, 1)))
    if raster and raster != preferred:
        miss += 0.2
    dram_us = unique * (1 + miss) / DRAM_BYTES_PER_US
    reduce_us = 0.0
    if parts > 1 and cfg.scheduler != "streamk":
        reduce_us = 2.0 + 8.0 * m * n * parts / DRAM_BYTES_PER_US
    return LAUNCH_US[cfg.family] + max(compute_us, dram_us, l2_bytes / L2_BYTES_PER_US) + reduce_us


def baseline_model_us(problem: Problem) -> float:
    """The noise-free simulated cuBLASLt-autotune time: the best of BASELINE_TILES at its preferred knobs."""
    best = math.inf
    for tile, cluster, schedule, scheduler in BASELINE_TILES:
        cfg = HgemmConfig("sm90_tma_ws", problem.dtype, problem.layout, *tile, cluster_m=cluster[0],
                          cluster_n=cluster[1], schedule=schedule, scheduler=scheduler)
        knobs = (0, 2, 2 if problem.n >= problem.m else 1)
        best = min(best, model_us(cfg, knobs, problem.m, problem.n, problem.k))
    return best


@dataclasses.dataclass
class SimulatedBackend:
    """The backend protocol over the cost model. `eval_delay_s` sleeps per evaluation (to test interruption).
    Compiles and verdicts are pure functions of (seed, candidate, problem), so any instance agrees with a store."""

    seed: int = 0
    eval_delay_s: float = 0.0

    def environment(self) -> dict[str, Any]:
        """A simulated H100 SXM."""
        return {"gpu_name": "Simulated H100 SXM", "arch": 90, "capability": [9, 0], "sm_count": SM_COUNT,
                "driver": "simulated", "cuda": "simulated", "simulated": True}

    def prebuilt(self) -> set[str]:
        """The default kernel set, as if built into the extension."""
        return {cfg.name for cfg in default_configs()}

    def compile(self, candidates: list[Candidate]) -> dict[str, CompileOutcome]:
        """Simulated builds (deterministic per build key, so a resumed run's backend agrees with the store)."""
        return {cand.build_key: _compiles(self.seed, cand) for cand in candidates}

    def evaluate(self, requests: list[tuple[Candidate, Problem]]) -> list[EvalResult]:
        """Simulated checks and timings of each request."""
        results = []
        for cand, problem in requests:
            if self.eval_delay_s:
                time.sleep(self.eval_delay_s)
            results.append(self._evaluate_one(cand, problem))
        return results

    def _evaluate_one(self, cand: Candidate, problem: Problem) -> EvalResult:
        gpu = self.environment()
        if not _compiles(self.seed, cand).ok:
            return EvalResult(COMPILE_ERROR, reason=f"{cand.build_key} does not build", gpu=gpu)
        if _unit_hash(self.seed, "crash", cand.id, problem.key) < 1 / CRASH_EVERY:
            return EvalResult(CRASH, reason="simulated: illegal memory access (worker died)", gpu=gpu)
        if _unit_hash(self.seed, "wrong", cand.id) < 1 / WRONG_EVERY:
            return EvalResult(INCORRECT, max_rel_err=0.5, reason="simulated: random check max rel err 0.5", gpu=gpu)
        m, n, k = problem.m, problem.n, problem.k
        base = baseline_model_us(problem)
        if cand.source:
            model = base * 1.2
        else:
            cfg = HgemmConfig.from_name(cand.config)
            if cfg.family == "decode" and m > 256:
                return EvalResult(UNSUPPORTED, reason="decode kernels take M <= 256", gpu=gpu)
            model = model_us(cfg, cand.knobs, m, n, k)
        case_us = [model * _noise(self.seed, cand.id, problem.key, case) for case in range(TEST_CASES)]
        case_base = [base * _noise(self.seed, "baseline", problem.key, case) for case in range(TEST_CASES)]
        case_us.sort()
        case_base.sort()
        return EvalResult(OK, us=case_us[TEST_CASES // 2], baseline_us=case_base[TEST_CASES // 2],
                          case_speedups=[b / c for b, c in zip(case_base, case_us)],
                          max_rel_err=2e-4 * (1 + cand.knobs[0]), gpu=gpu, eval_s=0.05)

    def close(self) -> None:
        """Nothing to release."""
