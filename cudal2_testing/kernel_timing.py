"""One GEMM problem on the GPU: a kernel (by name, with its knobs) checked against the fp32 reference and timed in
kernel mode beside cuBLASLt-autotune, on the same inputs. Used by the search's sweep and evaluator and by the
benchmarks, so that all of them check and time a candidate the same way.

A candidate record is {"kernel", "splits", "swizzle", "raster", "err", "correct"} plus "us" when it was correct and
timed (`ProblemRun.candidate`); the environment is the GPU's facts a table header records (`environment`).
"""
from __future__ import annotations

import dataclasses

import torch

import cudal2_ops
from cudal2_catalog.config import DEFAULT_KNOBS, Knobs
from cudal2_ops._extension import _C
from cudal2_testing import lt_baseline
from cudal2_testing.correctness.reference import DTYPES as TORCH_DTYPES
from cudal2_testing.correctness.reference import REL_TOL
from cudal2_testing.correctness.reference import reference as fp32_reference
from cudal2_testing.measure import env, timing
from cudal2_testing.measure.cold_l2 import bytes_per_call, cold_set_count, l2_bytes

COLD_MAX_SETS = 64  # smaller problems are launch-bound; more sets only lengthen every replay's capture


def kernel_impl(name: str, layout: str, knobs: Knobs = DEFAULT_KNOBS):
    """An `impl(a, b, bias, out)` running one loaded kernel by name with `knobs` (the correctness checks' calling
    convention); raises RuntimeError when the kernel declines the problem or the knobs."""
    def impl(a, b, bias, out):
        _C.tuning.run_kernel(name, a, b, bias, out, layout, *knobs)
        return out
    return impl


def time_call(call, n_sets: int = 1, target_ms: float = 1.0) -> float:
    """Median per-call GPU time (us) of `call(i)` (runs on input set i) in kernel mode, rotating over `n_sets` sets,
    with replays of about `target_ms`."""
    call(0)
    est = timing.estimate_ms(call, n_sets)
    return timing.kernel_mode(call, n_sets, est, target_ms=target_ms)["median_us"]


def fastest(cands: list[dict], count: int) -> list[dict]:
    """The `count` fastest correct timed candidate records, fastest first."""
    return sorted((c for c in cands if c["correct"] and c.get("us")), key=lambda c: c["us"])[:count]


@dataclasses.dataclass
class ProblemRun:
    """One problem's inputs, fp32 reference and output buffer, shared by the baseline and every candidate."""

    layout: str
    a: torch.Tensor
    b: torch.Tensor
    out: torch.Tensor
    ref: torch.Tensor
    tol: float
    extra_sets: tuple[tuple[torch.Tensor, torch.Tensor], ...] = ()  # more (a, b) for cold-weight timing
    autotuned: lt_baseline.AutotunedLt | None = None  # the cuBLASLt-autotune baseline, created on first use

    @classmethod
    def random(cls, layout: str, dtype: str, m: int, n: int, k: int, cold: bool = False) -> "ProblemRun":
        """Random normal operands on the GPU, with the relative-error tolerance of `dtype`. With `cold`, extra
        operand sets so that the sets total more than 4x the L2 (the cold-L2 rule; at most COLD_MAX_SETS): timed
        calls rotate over them and do not find their weight in L2, as in LLM decode."""
        tdtype = TORCH_DTYPES[dtype]
        a = torch.randn(m, k, device="cuda", dtype=tdtype)
        b = torch.randn((k, n) if layout == "nn" else (n, k), device="cuda", dtype=tdtype)
        out = torch.empty(m, n, device="cuda", dtype=tdtype)
        count = cold_set_count(bytes_per_call(m, n, k), l2_bytes(), cap=COLD_MAX_SETS) if cold else 1
        extra = tuple((torch.randn_like(a), torch.randn_like(b)) for _ in range(count - 1))
        return cls(layout, a, b, out, fp32_reference(a, b, layout), REL_TOL[tdtype], extra)

    @property
    def n_sets(self) -> int:
        """Operand sets timed calls rotate over (1: warm L2)."""
        return 1 + len(self.extra_sets)

    def operands(self, i: int) -> tuple[torch.Tensor, torch.Tensor]:
        """(a, b) of set i; set 0 is the checked one."""
        return (self.a, self.b) if i == 0 else self.extra_sets[i - 1]

    @property
    def mnk(self) -> tuple[int, int, int]:
        """The problem's M, N, K."""
        return self.out.shape[0], self.out.shape[1], self.a.shape[1]

    def rel_err(self) -> float:
        """Relative Frobenius error of `out` against the reference."""
        return ((self.out.float() - self.ref).norm() / self.ref.norm().clamp_min(1e-30)).item()

    def baseline_call(self, policy: str = "autotune"):
        """call(i): cuBLASLt on input set i, on the baseline instance: "heuristic" (its top algorithm) or "autotune"
        (lt_baseline.AutotunedLt: the configuration chosen by CUDA-graph replay on the problem's first call, which must
        not be captured, and kept for this run's later calls; the bar the tables and the search judge use)."""
        if policy == "autotune":
            if self.autotuned is None:
                self.autotuned = lt_baseline.AutotunedLt(self.layout)
            autotuned = self.autotuned

            def call(i: int) -> None:
                autotuned(*self.operands(i), self.out)
            return call
        heuristic = lt_baseline.heuristic(self.layout)

        def call(i: int) -> None:
            heuristic(*self.operands(i), self.out)
        return call

    def candidate(self, name: str, knobs: Knobs, target_ms: float = 1.0) -> dict | None:
        """Kernel `name` under `knobs`: its relative error, whether that is within tolerance and, only then, its time
        (replays of about `target_ms`); None when the kernel rejects the problem or the knobs."""
        impl = kernel_impl(name, self.layout, knobs)

        def call(i: int) -> None:
            impl(*self.operands(i), None, self.out)
        self.out.fill_(float("nan"))
        try:
            call(0)
        except RuntimeError:
            return None
        err = self.rel_err()
        cand = {"kernel": name, **Knobs(*knobs).to_dict(), "err": err, "correct": err <= self.tol}
        if cand["correct"]:
            cand["us"] = time_call(call, self.n_sets, target_ms)
        return cand


def environment() -> dict:
    """The facts a table header is validated against (GPU name, SM count, capability, CUDA), plus provenance."""
    props = torch.cuda.get_device_properties(0)
    return {"gpu_name": props.name, "sm_count": props.multi_processor_count, "capability": [props.major, props.minor],
            "cuda": torch.version.cuda, "driver": env.nvidia_smi(0).get("driver_version"),
            "cutlass": env.cutlass_version(), "package_version": cudal2_ops.__version__, "torch": torch.__version__,
            "commit": env.git_commit(), "pdl_disabled": env.pdl_disabled()}
