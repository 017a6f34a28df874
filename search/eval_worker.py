"""The evaluation worker (the judge): one process per GPU that checks and times candidates, speaking JSON lines.

Started by `search.evaluator` with CUDA_VISIBLE_DEVICES set to one GPU. On start it writes {"ready": true,
"environment": {...}}; then for each request line {"candidate": {...}, "problem": {...}, "artifact": path, "cases":
n, "seed": s, "timeout_s": t} it writes one {"result": EvalResult, "restart": bool} line.

Candidate code never runs in this process. Each request starts a fresh candidate runner (`search.sandbox`), the only
process that loads the candidate's library; it runs the kernel on buffers this process owns and shares with it, and
is killed after the request. Everything the verdict rests on is computed here, from this process's memory and its
own CUDA events: the outputs (read back and compared with fp32 references here), the candidate's time (this
process's events around the runner's replay, `judge_timing.Bracket`), the baseline (cuBLASLt-autotune as the
benchmarks and the tables define it, `cudal2_testing.lt_baseline.AutotunedLt`: every heuristic candidate timed by
CUDA-graph replay, the fastest kept per problem for the worker's life; its choice timed here like the candidate,
before the runner starts, so a candidate cannot slow it down) and the wall clock. So a constructor or a launcher
that patches Python (should one pass the object check of `search.object_check`) patches only the runner: it can make
the runner lie about what it did, but not change what this process reads and measures; what it could still forge
(the runner's own event time and node census) is cross-checked here.

Per request, PDL off (CUDAL2_DISABLE_PDL=1 here and in the runner):
1. the baseline's time per case, in kernel mode over R calls on R buffer sets (`judge_timing.TimingSets`), and its
   wall clock per eager call;
2. the correctness checks through the runner (random seeds, exact integers at large and at small K, NaN-poisoned
   output with guard bands around every operand and the workspace), each call a device-wide synchronize in the
   runner so a fault is caught at its call;
3. the stream check: the runner's stream waits behind this process's stream while it sleeps and writes new inputs;
   work that ran on any other stream (legacy default, per-thread, private) read the old inputs;
4. the graph: R calls captured on the runner's stream must hold at least R kernel nodes and nothing host-side;
5. per case, timed replays of that graph, every output poisoned before and checked after each replay (skipped or
   escaped work leaves NaN), then eager calls checked the same way and timed by the wall clock here, flagged when
   slower than 1.5x the larger of the candidate's event time and the baseline's own wall clock per call;
6. the roofline bound. Faults and hangs of the runner are CRASH / HANG, and this process restarts (its streams may
   wait on an event the dead runner never recorded).

    CUDA_VISIBLE_DEVICES=0 python -m search.eval_worker
"""
from __future__ import annotations

import dataclasses
import json
import math
import os
import statistics
import sys
import time

from search.candidate import CRASH, INCORRECT, OK, SUSPICIOUS, UNSUPPORTED, Candidate, EvalResult, Problem
from search.sandbox import RunnerDied

# Test hook, read only here: CUDAL2_EVAL_WORKER_SELFTEST=1 makes the worker evaluate without a GPU, crashing on a
# candidate whose config is "selftest_crash", hanging on "selftest_hang" and raising a CUDA-like error on
# "selftest_error" (tests of the evaluator's isolation).
SELFTEST_ENV = "CUDAL2_EVAL_WORKER_SELFTEST"
# Set by the evaluator when it restarts a worker: the peak measured by the worker's first start (measured once).
PEAK_ENV = "CUDAL2_EVAL_PEAK_TFLOPS"
PDL_ENV = "CUDAL2_DISABLE_PDL"
WALL_RATIO = 1.5             # eager wall clock above this times max(event time, baseline wall clock): SUSPICIOUS
WALL_SLACK_US = 2.0
JUDGE_RUNNER_RATIO = 1.25    # the judge's bracket above this times the runner's own event time: SUSPICIOUS
JUDGE_RUNNER_SLACK_US = 1.0
ROOFLINE_MARGIN = 0.8        # faster than this fraction of the compute floor (2MNK / measured peak): SUSPICIOUS
REPS = 10                    # timed replays per case
EAGER_MS = 5.0               # eager calls of the wall-clock check: about this long
WORKSPACE_LIMIT = 32 << 20   # the extension's workspace: a kernel asking for more declines the problem
FORBIDDEN_NODES = ("host", "mem_alloc", "mem_free", "semaphore_signal", "semaphore_wait", "conditional",
                   "batch_mem_op")
PROTOCOL = ("judge: candidate in a separate runner process; kernel-mode time = the judge's CUDA events around the "
            "runner's graph replay of R calls on R (A_i, D_i) sets with one warm B, less an empty replay's bracket; "
            "baseline cuBLASLt-autotune (every heuristic candidate timed by graph replay, the fastest kept: "
            "cudal2_testing.lt_baseline) timed in the judge over the same sets; every output checked after every "
            "replay; PDL off")


class Verdict(Exception):
    """A verdict reached before the end of the checks."""

    def __init__(self, status: str, reason: str, **fields):
        super().__init__(reason)
        self.result = EvalResult(status, reason=reason[-2000:], **fields)


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
    """The judge on this process's GPU (imports torch and the extension; never loads a candidate library)."""

    def __init__(self):
        import torch  # noqa: PLC0415 (the self-test worker runs without torch's CUDA)

        from cudal2_ops._extension import _C  # noqa: PLC0415
        from cudal2_testing import kernel_timing  # noqa: PLC0415
        from cudal2_testing.correctness import checks  # noqa: PLC0415
        from cudal2_testing.measure import env as measure_env  # noqa: PLC0415
        from cudal2_testing.measure import timing  # noqa: PLC0415
        from cudal2_testing.correctness.inputs import GUARD_BYTES, random_inputs  # noqa: PLC0415
        from cudal2_testing.correctness.reference import DTYPES  # noqa: PLC0415
        from cudal2_testing.lt_baseline import AutotunedLt  # noqa: PLC0415
        from search import judge_timing, runner_client  # noqa: PLC0415
        from search.cuda_runtime import Runtime  # noqa: PLC0415
        if _C is None or not torch.cuda.is_available():
            raise RuntimeError("the evaluation worker needs the compiled extension and a CUDA GPU")
        self.torch, self._C, self.checks, self.timing = torch, _C, checks, timing
        self.jt, self.rc, self.rt = judge_timing, runner_client, Runtime()
        self.dtypes, self.guard_bytes, self.random_inputs = DTYPES, GUARD_BYTES, random_inputs
        self.baseline = {layout: AutotunedLt(layout) for layout in ("nn", "nt")}  # choices kept per problem
        self.environment = kernel_timing.environment()
        self.environment["arch"] = self.environment["capability"][0] * 10 + self.environment["capability"][1]
        known_peak = os.environ.get(PEAK_ENV)
        self.peak_tflops = float(known_peak) if known_peak else measure_env.measure_roofline()["peak_tflops"]
        self.environment["peak_tflops"] = self.peak_tflops
        self.environment["evaluation"] = PROTOCOL

    # -- the baseline, timed before any runner exists ------------------------------------------------------------
    def _baseline_call(self, sets):
        """call(i): the baseline's configuration (chosen by `_baseline_estimate_us`) on set i, run by the binding
        directly, so that the baseline's wall clock per call, a bar of the candidate's, holds no Python lookup."""
        baseline = self.baseline[sets.layout]
        baseline(sets.a[0], sets.b, sets.d[0])   # chosen already for operands of these shapes and strides
        config = baseline.chosen[baseline.key(sets.a[0], sets.b)]
        run = self._C.testing.cublaslt_run_config

        def call(i: int) -> None:
            run(sets.a[i], sets.b, None, sets.d[i], sets.layout, config)
        return call

    def _baseline_estimate_us(self, problem: Problem, dtype) -> float:
        torch = self.torch
        a = torch.randn(problem.m, problem.k, device="cuda", dtype=dtype)
        b = torch.randn((problem.k, problem.n) if problem.layout == "nn" else (problem.n, problem.k), device="cuda",
                        dtype=dtype)
        out = torch.empty(problem.m, problem.n, device="cuda", dtype=dtype)
        baseline = self.baseline[problem.layout]

        def call(i: int) -> None:
            baseline(a, b, out)
        call(0)   # selects the configuration (the first call of a problem; never inside a capture)
        return self.timing.estimate_ms(call, 1) * 1e3

    def _wall_us(self, call, calls: int, count: int) -> float:
        self.torch.cuda.synchronize()
        start = time.perf_counter()
        for i in range(count):
            call(i % calls)
        self.torch.cuda.synchronize()
        return (time.perf_counter() - start) * 1e6 / count

    def _baselines(self, sets, seeds: list[int]) -> tuple[list[float], list[float]]:
        """(kernel-mode us per call, eager wall-clock us per call) of the baseline, per case."""
        call = self._baseline_call(sets)
        times, walls = [], []
        for seed in seeds:
            sets.fill(seed, references=False)
            call(0)
            est_ms = self.timing.estimate_ms(call, sets.calls)
            times.append(self.timing.kernel_mode(call, sets.calls, est_ms, target_ms=self.jt.TARGET_MS,
                                                 cap=sets.calls, cold_cap=sets.calls)["median_us"])
            count = max(sets.calls, min(4096, math.ceil(EAGER_MS * 1e3 / max(times[-1], 1.0))))
            walls.append(self._wall_us(call, sets.calls, count))
        return times, walls

    # -- the candidate, through the runner -----------------------------------------------------------------------
    def _correctness(self, impl, problem: Problem, dtype) -> None:
        """Raises a Verdict at the first failed check; a launch that declines (ABI status 1 or 2) is UNSUPPORTED,
        any other nonzero status a CRASH."""
        try:
            self._checks(impl, problem, dtype)
        except self.rc.CandidateDeclined as declined:
            if declined.status in (1, 2):
                raise Verdict(UNSUPPORTED, f"the kernel declines the problem: {declined}") from None
            raise Verdict(CRASH, f"the launch failed: {declined}") from None

    def _checks(self, impl, problem: Problem, dtype) -> None:
        checks, shape = self.checks, (problem.m, problem.n, problem.k)
        ctx = checks.CheckContext()
        probe = self.random_inputs(shape, problem.layout, dtype, False, 7, ctx.device)
        impl(probe[0], probe[1], None, self.torch.empty(problem.m, problem.n, device="cuda", dtype=dtype))
        for check in (checks.check_random, checks.check_exact, checks.check_exact_small_k, checks.check_guards):
            result = check(impl, shape, problem.layout, dtype, ctx)
            if not result.passed:
                raise Verdict(INCORRECT, f"{result.check} check: {result.detail}")
        impl.synchronous = False
        try:
            result = checks.check_stream(impl, shape, problem.layout, dtype, ctx)
        finally:
            impl.synchronous = True
        error = impl.runner.request("sync").get("error")
        if error:
            raise RunnerDied(CRASH, f"the candidate's kernel failed: {error}")
        if not result.passed:
            raise Verdict(INCORRECT, f"stream check: {result.detail}")

    def _capture(self, runner, sets, specs: list[dict]) -> None:
        """Captures the R calls; raises a Verdict unless the graph holds at least R kernel nodes and no host work."""
        answer = runner.request("capture", problems=specs)
        if answer.get("error"):
            raise Verdict(SUSPICIOUS, f"capturing {sets.calls} calls on the caller's stream: {answer['error']}")
        if any(answer["statuses"]):
            raise Verdict(SUSPICIOUS, f"the launcher returned statuses {answer['statuses'][-1]} under capture after "
                                      f"accepting the problem outside it")
        nodes = answer["nodes"]
        if nodes.get("kernel", 0) < sets.calls:
            raise Verdict(SUSPICIOUS, f"the graph captured from {sets.calls} calls on the caller's stream holds "
                                      f"{nodes.get('kernel', 0)} kernel nodes ({nodes}): work escaped the stream or "
                                      f"calls were skipped")
        forbidden = {t: c for t, c in nodes.items() if t in FORBIDDEN_NODES}
        if forbidden:
            raise Verdict(SUSPICIOUS, f"the captured graph holds host-side or allocation nodes {forbidden}")

    def _time_case(self, runner, bracket, sets, specs: list[dict], workspace, overhead_us: float, case: int,
                   base_wall_us: float, flags: list[str]) -> float:
        """The candidate's us per call on one case (judge's events); every output checked after every replay."""
        torch = self.torch
        times, runner_times = [], []
        for rep in range(REPS):
            sets.poison()
            workspace.fill_(rep * 37 % 251)
            torch.cuda.synchronize()
            us, _ = bracket.measure("replay")
            timed = runner.request("timed")
            if timed.get("error"):
                raise RunnerDied(CRASH, f"the candidate's kernel failed during replay {rep}: {timed['error']}")
            wrong = sets.wrong_outputs()
            if wrong:
                raise Verdict(INCORRECT, f"case {case}, timed replay {rep}: {wrong}: the work is not in the graph "
                                         f"captured on the caller's stream, or calls were skipped")
            times.append(us)
            runner_times.append(timed["us"])
        cand_us = max(statistics.median(times) - overhead_us, 0.0) / sets.calls
        runner_us = statistics.median(runner_times) / sets.calls
        if cand_us > JUDGE_RUNNER_RATIO * runner_us + JUDGE_RUNNER_SLACK_US:
            flags.append(f"case {case}: the judge's events saw {cand_us:.2f} us per call, the runner's own "
                         f"{runner_us:.2f} us")
        pings = []
        for _ in range(5):
            start = time.perf_counter()
            runner.request("ping")
            pings.append(time.perf_counter() - start)
        count = max(sets.calls, min(4096, math.ceil(EAGER_MS * 1e3 / max(cand_us, base_wall_us, 1.0))))
        sets.poison()
        torch.cuda.synchronize()
        start = time.perf_counter()
        answer = runner.request("eager", problems=specs, calls=count)
        wall_us = max(time.perf_counter() - start - statistics.median(pings), 0.0) * 1e6 / count
        if answer.get("error"):
            raise RunnerDied(CRASH, f"the candidate's kernel failed in eager calls: {answer['error']}")
        wrong = sets.wrong_outputs()
        if answer.get("nonzero") or wrong:
            raise Verdict(INCORRECT, f"case {case}, {count} eager calls: {wrong or 'nonzero launch statuses'}")
        if wall_us > WALL_RATIO * max(cand_us, base_wall_us) + WALL_SLACK_US:
            flags.append(f"case {case}: wall clock {wall_us:.1f} us per eager call vs {cand_us:.1f} us by the "
                         f"judge's events (baseline wall clock {base_wall_us:.1f} us)")
        return cand_us

    def _judge(self, request: dict, cand: Candidate, problem: Problem, dtype, regions, sets, seeds, base_us,
               base_wall) -> EvalResult:
        rc, jt = self.rc, self.jt
        timeout = max(5.0, float(request.get("timeout_s", 300.0)) / 3)
        try:
            runner = rc.RunnerClient(request["artifact"], cand.kernel_name, regions, timeout)
        except LookupError as exc:
            return EvalResult(UNSUPPORTED, reason=f"cannot load {cand.kernel_name} from {request['artifact']}: {exc}")
        try:
            kernel = runner.kernel
            if (kernel["abi_version"] != 1 or kernel["dtype"] != rc.DTYPE_CODES[dtype]
                    or kernel["layout"] != rc.LAYOUT_CODES[problem.layout]):
                return EvalResult(UNSUPPORTED, reason=f"kernel {cand.kernel_name} ({kernel}) is not for "
                                                      f"{problem.dtype} {problem.layout} (ABI 1)")
            knobs = tuple(cand.knobs)
            impl = rc.RunnerImpl(runner, regions[1], 1, problem.layout, knobs, WORKSPACE_LIMIT)
            self._correctness(impl, problem, dtype)
            specs = sets.specs(knobs, None, 0)
            workspace_bytes = int(runner.request("query", problem=specs[0])["workspace"])
            if workspace_bytes > WORKSPACE_LIMIT:
                return EvalResult(UNSUPPORTED, reason=f"needs {workspace_bytes} bytes of workspace; the library "
                                                      f"gives {WORKSPACE_LIMIT}")
            specs = sets.specs(knobs, [2, 0], workspace_bytes)
            flags: list[str] = []
            cand_us, errs = [], []
            bracket = jt.Bracket(runner)
            for case, seed in enumerate(seeds):
                sets.fill(seed)
                if case == 0:
                    self._capture(runner, sets, specs)
                    overhead_us = bracket.overhead_us()
                cand_us.append(self._time_case(runner, bracket, sets, specs, regions[2].tensor, overhead_us, case,
                                               base_wall[case], flags))
                errs.append(sets.max_error())
        finally:
            runner.close()
        us, baseline = statistics.median(cand_us), statistics.median(base_us)
        floor_us = 2 * problem.m * problem.n * problem.k / (self.peak_tflops * 1e6)
        if us < ROOFLINE_MARGIN * floor_us:
            flags.append(f"{us:.2f} us is below {ROOFLINE_MARGIN} x the compute floor {floor_us:.2f} us "
                         f"({self.peak_tflops:.0f} TFLOP/s measured)")
        return EvalResult(SUSPICIOUS if flags else OK, us=us, baseline_us=baseline,
                          case_speedups=[b / max(c, 1e-9) for b, c in zip(base_us, cand_us)], max_rel_err=max(errs),
                          reason="; ".join(flags), gpu=self.environment)

    def evaluate(self, request: dict) -> EvalResult:
        """The verdict on one candidate (its library at request["artifact"]) for one problem."""
        jt, rc = self.jt, self.rc
        cand, problem = Candidate.from_json(request["candidate"]), Problem(**request["problem"])
        dtype = self.dtypes[problem.dtype]
        m, n, k = problem.m, problem.n, problem.k
        calls = jt.TimingSets.calls_for(m, n, k, dtype, self._baseline_estimate_us(problem, dtype))
        a_bytes, b_bytes, d_bytes = jt.TimingSets.set_bytes(m, n, k, dtype)
        guards = 8 * (self.guard_bytes + rc.ALIGN)
        regions = [rc.SharedRegion(self.rt, jt.TimingSets.region_bytes(m, n, k, dtype, calls)),
                   rc.SharedRegion(self.rt, a_bytes + b_bytes + d_bytes + WORKSPACE_LIMIT + guards),
                   rc.SharedRegion(self.rt, WORKSPACE_LIMIT)]
        sets = jt.TimingSets(regions[0], 0, m, n, k, problem.layout, dtype, calls)
        try:
            seeds = [request.get("seed", 0) * 1000 + case for case in range(request.get("cases", 3))]
            base_us, base_wall = self._baselines(sets, seeds)
            result = self._judge(request, cand, problem, dtype, regions, sets, seeds, base_us, base_wall)
        except Verdict as verdict:
            result = verdict.result
        # (after RunnerDied the regions are left to the process's exit: a stream may wait on the dead runner)
        del sets
        for region in regions:
            region.close()
        return result


def serve(evaluate, environment: dict, requests, replies) -> None:
    """Answers each request line with {"result": EvalResult, "restart": bool}. A Python error while evaluating a
    candidate is a CRASH verdict on it with the error as the reason; a runner that died, hung or faulted gives its
    CRASH / HANG. In both cases this process then stops (its CUDA state may be unusable) and `restart` tells the
    parent to start a fresh one."""
    replies.write(json.dumps({"ready": True, "environment": environment}) + "\n")
    replies.flush()
    for line in requests:
        request = json.loads(line)
        start = time.monotonic()
        failed = False
        try:
            result = evaluate(request)
        except RunnerDied as died:
            result = EvalResult(died.status, reason=str(died)[-2000:])
            failed = True
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
    # the protocol. Rewards are measured with PDL off; no candidate library is loaded into this process.
    os.environ[PDL_ENV] = "1"
    os.environ.pop("CUDAL2_KERNEL_LIBS", None)
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    if os.environ.get(SELFTEST_ENV) == "1":
        serve(selftest_evaluate, {"gpu_name": "selftest", "arch": 0, "pdl_disabled": os.environ[PDL_ENV] == "1"},
              sys.stdin, replies)
        return
    evaluator = GpuEvaluator()
    serve(evaluator.evaluate, evaluator.environment, sys.stdin, replies)


if __name__ == "__main__":
    main()
