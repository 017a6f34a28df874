"""The evaluation worker: one process per GPU that checks and times candidates, speaking JSON lines on stdin/stdout.

Started by `search.evaluator` with CUDA_VISIBLE_DEVICES set to one GPU; a candidate that faults or hangs takes this
process down, not the search. On start it writes {"ready": true, "environment": {...}}; then for each request line
{"candidate": {...}, "problem": {...}, "artifact": path, "cases": n, "seed": s} it writes one EvalResult line.
Timing functions are bound at import, before any candidate library is loaded (a library cannot swap them).
Per case (fresh inputs at moved addresses): correctness (random seeds, exact integers, NaN-poisoned output with
guard bands), cuBLASLt-autotune and the candidate timed in kernel mode on the same inputs, a wall-clock cross-check
of the events, and a re-check of the output after the timed loop; then the roofline bound.

    CUDA_VISIBLE_DEVICES=0 python -m search.eval_worker
"""
from __future__ import annotations

import dataclasses
import json
import os
import statistics
import sys
import time

from search.candidate import CRASH, INCORRECT, OK, SUSPICIOUS, UNSUPPORTED, Candidate, EvalResult, Problem
from cudal2_catalog.config import Knobs

# Test hook, read only here: CUDAL2_EVAL_WORKER_SELFTEST=1 makes the worker evaluate without a GPU, crashing on a
# candidate whose config is "selftest_crash", hanging on "selftest_hang" and raising a CUDA-like error on
# "selftest_error" (tests of the evaluator's isolation).
SELFTEST_ENV = "CUDAL2_EVAL_WORKER_SELFTEST"
# Set by the evaluator when it restarts a worker: the peak measured by the worker's first start (measured once).
PEAK_ENV = "CUDAL2_EVAL_PEAK_TFLOPS"
WALL_EVENT_RATIO = 1.5       # wall clock above this times the events' figure: SUSPICIOUS
WALL_CHECK_MIN_US = 40.0     # the wall-clock check runs where GPU time dominates launch cost (eager calls pipeline)
ROOFLINE_MARGIN = 0.8        # faster than this fraction of the compute floor (2MNK / measured peak): SUSPICIOUS
WALL_CALLS = 20              # eager calls of the wall-clock cross-check
# ABI statuses of a launch that declines the problem (1 unsupported; 2 needs more workspace than the library's 32 MiB,
# e.g. many K splits of a large M x N): the candidate cannot serve it through cudal2, which is no fault.
DECLINED_STATUSES = ("returned status 1 ", "returned status 2 ")


def declined(exc: Exception) -> bool:
    """Whether a launch error is the kernel declining the problem (UNSUPPORTED) rather than a fault (CRASH)."""
    return any(status in str(exc) for status in DECLINED_STATUSES)


def selftest_evaluate(request: dict) -> EvalResult:
    """The self-test evaluator (no GPU): crash, hang or a fixed OK verdict by candidate config name."""
    config = request["candidate"]["config"]
    if config == "selftest_crash":
        os.abort()
    if config == "selftest_hang":
        time.sleep(3600)
    if config == "selftest_error":
        raise RuntimeError("CUDA error: an illegal memory access was encountered (self-test)")
    return EvalResult(OK, us=10.0, baseline_us=11.0, case_speedups=[1.1], gpu={"gpu_name": "selftest"})


class GpuEvaluator:
    """Checks and times candidates on this process's GPU (imports torch and the extension; binds the timers)."""

    def __init__(self):
        import torch  # noqa: PLC0415 (the self-test worker runs without torch's CUDA)

        from cudal2_ops._extension import _C  # noqa: PLC0415
        from cudal2_testing.correctness import checks  # noqa: PLC0415
        from cudal2_testing.measure import env as measure_env  # noqa: PLC0415
        from search import sweep  # noqa: PLC0415
        if _C is None or not torch.cuda.is_available():
            raise RuntimeError("the evaluation worker needs the compiled extension and a CUDA GPU")
        self.torch, self._C, self.checks, self.sweep = torch, _C, checks, sweep
        # Bound before any candidate library loads.
        self._time_call, self._perf_counter, self._synchronize = sweep.time_call, time.perf_counter, torch.cuda.synchronize
        self.environment = sweep.environment()
        self.environment["arch"] = self.environment["capability"][0] * 10 + self.environment["capability"][1]
        known_peak = os.environ.get(PEAK_ENV)
        self.peak_tflops = float(known_peak) if known_peak else measure_env.measure_roofline()["peak_tflops"]
        self.environment["peak_tflops"] = self.peak_tflops
        self.loaded: set[str] = set()

    def _wall_us(self, call) -> float:
        """Per-call wall time of WALL_CALLS eager calls, with a device-wide synchronize before and after."""
        self._synchronize()
        start = self._perf_counter()
        for _ in range(WALL_CALLS):
            call(0)
        self._synchronize()
        return (self._perf_counter() - start) * 1e6 / WALL_CALLS

    def _correctness(self, impl, problem: Problem, dtype) -> str:
        """The failed checks' details ("" when all pass): random seeds, exact integers, poisoned output + guards."""
        shape, ctx = (problem.m, problem.n, problem.k), self.checks.CheckContext()
        for check in (self.checks.check_random, self.checks.check_exact, self.checks.check_guards):
            result = check(impl, shape, problem.layout, dtype, ctx)
            if not result.passed:
                return f"{result.check} check: {result.detail}"
        return ""

    def evaluate(self, request: dict) -> EvalResult:
        """The verdict on one candidate (its library at request["artifact"]) for one problem."""
        torch, sweep = self.torch, self.sweep
        cand, problem = Candidate.from_json(request["candidate"]), Problem(**request["problem"])
        if request["artifact"] not in self.loaded:
            try:
                self._C.load_kernel_library(request["artifact"])
            except RuntimeError as exc:
                return EvalResult(UNSUPPORTED, reason=f"cannot load {request['artifact']}: {exc}")
            self.loaded.add(request["artifact"])
        impl = sweep.kernel_impl(cand.kernel_name, problem.layout, Knobs(*cand.knobs))
        dtype = sweep.TORCH_DTYPES[problem.dtype]
        probe = sweep.ProblemRun.random(problem.layout, problem.dtype, problem.m, problem.n, problem.k)
        try:
            impl(probe.a, probe.b, None, probe.out)
        except RuntimeError as exc:
            if not declined(exc):
                raise
            return EvalResult(UNSUPPORTED, reason=str(exc)[-2000:])
        self._synchronize()  # an asynchronous fault of the first launch surfaces here (a CRASH)
        failed = self._correctness(impl, problem, dtype)
        if failed:
            return EvalResult(INCORRECT, reason=failed)
        torch.manual_seed(request.get("seed", 0))
        cand_us, base_us, errs, flags = [], [], [], []
        for case in range(request.get("cases", 3)):
            # A fresh allocation of a random size first: every case's inputs sit at new addresses.
            shift = torch.empty(int(torch.randint(1, 1 << 16, ()).item()), device="cuda", dtype=torch.uint8)
            run = sweep.ProblemRun.random(problem.layout, problem.dtype, problem.m, problem.n, problem.k)
            del shift

            def base_call(i, run=run):
                self._C.cublaslt_matmul(run.a, run.b, None, run.out, problem.layout, "autotune")

            def cand_call(i, run=run):
                impl(run.a, run.b, None, run.out)
            base_call(0)
            base_us.append(self._time_call(base_call))
            run.out.fill_(float("nan"))
            cand_us.append(self._time_call(cand_call))
            if cand_us[-1] >= WALL_CHECK_MIN_US:
                wall = self._wall_us(cand_call)
                if wall > WALL_EVENT_RATIO * cand_us[-1]:
                    flags.append(f"case {case}: wall clock {wall:.1f} us/call vs CUDA events {cand_us[-1]:.1f} us")
            errs.append(run.rel_err())  # the output the timed calls left (poisoned with NaN before them)
            if not errs[-1] <= run.tol:
                return EvalResult(INCORRECT, reason=f"case {case}: re-check of the timed calls' output: relative "
                                  f"error {errs[-1]:.3g} > {run.tol:g}", max_rel_err=errs[-1])
        us, baseline = statistics.median(cand_us), statistics.median(base_us)
        floor_us = 2 * problem.m * problem.n * problem.k / (self.peak_tflops * 1e6)
        if us < ROOFLINE_MARGIN * floor_us:
            flags.append(f"{us:.2f} us is below {ROOFLINE_MARGIN} x the compute floor {floor_us:.2f} us "
                         f"({self.peak_tflops:.0f} TFLOP/s measured)")
        status = SUSPICIOUS if flags else OK
        return EvalResult(status, us=us, baseline_us=baseline, case_speedups=[b / c for b, c in zip(base_us, cand_us)],
                          max_rel_err=max(errs), reason="; ".join(flags), gpu=self.environment)


def serve(evaluate, environment: dict, requests, replies) -> None:
    """Answers each request line with {"result": EvalResult, "restart": bool}. A Python error while evaluating a
    candidate (a CUDA fault surfaces as one) is a CRASH verdict on it with the error as the reason; the worker then
    stops, since its CUDA context may be unusable, and `restart` tells the parent to start a fresh one."""
    replies.write(json.dumps({"ready": True, "environment": environment}) + "\n")
    replies.flush()
    for line in requests:
        request = json.loads(line)
        start = time.monotonic()
        failed = False
        try:
            result = evaluate(request)
        except Exception as exc:  # noqa: BLE001 (any error of one candidate is that candidate's verdict)
            result = EvalResult(CRASH, reason=f"evaluation error: {type(exc).__name__}: {exc}"[-2000:])
            failed = True
        result.eval_s = time.monotonic() - start
        replies.write(json.dumps({"result": dataclasses.asdict(result), "restart": failed}) + "\n")
        replies.flush()
        if failed:
            return


def main() -> None:
    # Replies go on a private copy of stdout; fd 1 is pointed at stderr so that prints (C or Python) cannot corrupt
    # the protocol.
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    if os.environ.get(SELFTEST_ENV) == "1":
        serve(selftest_evaluate, {"gpu_name": "selftest", "arch": 0}, sys.stdin, replies)
        return
    evaluator = GpuEvaluator()
    serve(evaluator.evaluate, evaluator.environment, sys.stdin, replies)


if __name__ == "__main__":
    main()
