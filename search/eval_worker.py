"""The evaluation worker (the judge): one process per GPU that checks and times candidates, speaking JSON lines.

Started by `search.evaluator` with CUDA_VISIBLE_DEVICES set to one GPU. On start it writes {"ready": true,
"environment": {...}}; then for each request line, a batch of candidates for one problem {"problem": {...},
"candidates": [{"candidate": {...}, "artifact": path}, ...], "cases": n, "timeout_s": t, "baseline": doc or null},
it writes one {"result": EvalResult, "restart": bool} line per candidate, in order, each as soon as it is judged.

Candidate code never runs in this process. A batch starts a candidate runner (`search.sandbox`), the only process
that loads candidate libraries; it runs each kernel on buffers this process owns and shares with it (one set per
batch). The runner is kept from one candidate to the next only between config candidates (rendered by the catalog's
codegen, not written by the search) after an OK verdict, and from one batch to the next on the same terms (its
regions closed, then the next batch's mapped; idle on its pipe while a new problem's baseline is timed); a
search-written source, and any candidate after a failed check, gets a fresh runner that is killed after it, so an
untrusted source never shares a process with another candidate. Each candidate gets every check below and its own
captured graph. Everything the verdict rests on is computed here, from this process's memory and its
own CUDA events: the outputs (read back and compared with fp32 references here), the candidate's time (this
process's events around the runner's replay, `judge_timing.Bracket`), the baseline (cuBLASLt-autotune as the
benchmarks and the tables define it, `cudal2_testing.lt_baseline.AutotunedLt`: every heuristic candidate timed by
CUDA-graph replay, the fastest kept per problem for the worker's life; its choice timed here like the candidate,
before the batch's runner has a region or a request, so a candidate cannot slow it down: the only runner that may
exist then is one kept from an earlier batch, which ran only codegen's kernels, each passing every check, and waits
on its pipe with no work queued and no region mapped; on long problems timed again beside the candidate's
replays while its runner waits on its pipe, where no candidate code runs: the object check refuses threads and host
callbacks, the stream check other streams) and the wall clock. So a constructor or a launcher
that patches Python (should one pass the object check of `search.object_check`) patches only the runner: it can make
the runner lie about what it did, but not change what this process reads and measures; what it could still forge
(the runner's own event time and node census) is cross-checked here.

Per candidate, PDL off (CUDAL2_DISABLE_PDL=1 here and in the runner, which reports it; a runner with PDL on is refused):
1. the baseline's time per case, in kernel mode over R calls on R buffer sets (`judge_timing.TimingSets`), and its
   wall clock per eager call: timed once per problem and case (the cases' inputs are the problem's, the same for
   every candidate) before any runner works on the problem, and reused from the request's baseline document when
   it was timed under this process's fingerprint (same GPU, driver, CUDA, cuBLAS, torch, PDL, protocol:
   `search.baseline_cache`);
2. the correctness checks through the runner (random seeds, exact integers at large and at small K, NaN-poisoned
   output with guard bands around every operand and the workspace), each call a device-wide synchronize in the
   runner so a fault is caught at its call; the checks' inputs and references are made once per batch (the runner
   works on copies of them, so no candidate can change what the next is checked against);
3. the stream check: the runner's stream waits behind this process's stream while it sleeps and writes new inputs;
   work that ran on any other stream (legacy default, per-thread, private) read the old inputs. This check and the
   small-K exact check test the binary, not the problem: they run once per (library content, kernel, layout, dtype)
   in this process (`search.binary_checks`);
4. the graph: R calls captured on the runner's stream must hold at least R kernel nodes and nothing host-side;
5. per case, timed replays of that graph (at least 3, up to 10 or about 6 ms of replays), every output poisoned
   before and checked after each replay (skipped or escaped work leaves NaN); on a problem of 100 us or more per
   call, 200 ms of untimed replays first and the baseline's R calls timed again right before each replay, their
   median the case's baseline (a power-limited GPU is faster after a pause than busy: both sides are timed alike,
   `studies.judge_vs_tuner`); after the first case's replays, three batches of eager calls
   checked the same way and timed by the wall clock here: their median is flagged, when it stays so on a second
   measurement, above 2x the larger of the candidate's event time plus the baseline's host cost per call and the
   baseline's own wall clock per call (`judge_timing.wall_clock_bound_us`);
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
from typing import Iterator

from search import baseline_cache
from search.candidate import CRASH, INCORRECT, OK, SUSPICIOUS, UNSUPPORTED, Candidate, EvalResult, Problem
from search.binary_checks import BinaryChecks
from search.sandbox import PDL_ENV, RunnerDied

# Test hook, read only here: CUDAL2_EVAL_WORKER_SELFTEST=1 makes the worker evaluate without a GPU, crashing on a
# candidate whose config is "selftest_crash", hanging on "selftest_hang" and raising a CUDA-like error on
# "selftest_error" (tests of the evaluator's isolation).
SELFTEST_ENV = "CUDAL2_EVAL_WORKER_SELFTEST"
SELFTEST_FINGERPRINT = "selftest"
# Set by the evaluator when it restarts a worker: the peak measured by the worker's first start (measured once).
PEAK_ENV = "CUDAL2_EVAL_PEAK_TFLOPS"
JUDGE_RUNNER_RATIO = 1.25    # the judge's bracket above this times the runner's own event time: SUSPICIOUS
JUDGE_RUNNER_SLACK_US = 1.0
ROOFLINE_MARGIN = 0.8        # faster than this fraction of the compute floor (2MNK / measured peak): SUSPICIOUS
EAGER_MS = 4.5               # eager calls of the wall-clock check per case: about this long, in EAGER_BATCHES
EAGER_BATCHES = 3
WORKSPACE_LIMIT = 32 << 20   # the extension's workspace: a kernel asking for more declines the problem
FORBIDDEN_NODES = ("host", "mem_alloc", "mem_free", "semaphore_signal", "semaphore_wait", "conditional",
                   "batch_mem_op")
PROTOCOL = ("judge: candidate in a separate runner process; kernel-mode time = the judge's CUDA events around the "
            "runner's graph replay of R calls on R (A_i, D_i) sets (one randn per chunk of sets) with one warm B, "
            "the judge's GPU idle, less the least empty replay's bracket, at least the runner's own event time; "
            "baseline cuBLASLt-autotune (every heuristic candidate timed by graph replay, the fastest kept: "
            "cudal2_testing.lt_baseline) timed in the judge over the same sets; every output checked after every "
            "replay; PDL off; a problem of 100 us or more per call run 200 ms untimed right before each timing, "
            "and its baseline timed again before each of the candidate's replays (the verdict's baseline)")


class Verdict(Exception):
    """A verdict reached before the end of the checks."""

    def __init__(self, status: str, reason: str, **fields):
        super().__init__(reason)
        self.result = EvalResult(status, reason=reason[-2000:], **fields)


def selftest_judge(request: dict) -> Iterator[EvalResult]:
    """The self-test judge (no GPU): per candidate of the batch, crash, hang, error or a fixed OK verdict by config
    name; the baseline document is made on the first request of a problem and reused after (as the GPU judge)."""
    problem = Problem(**request["problem"])
    cases = request.get("cases", 3)
    doc = request.get("baseline")
    if not baseline_cache.valid(doc, SELFTEST_FINGERPRINT, problem.key, cases):
        doc = {"fingerprint": SELFTEST_FINGERPRINT, "problem": problem.key, "calls": 2,
               "seeds": baseline_cache.case_seeds(problem.key, cases), "us": [11.0] * cases, "wall_us": [12.0] * cases,
               "timed_by": os.getpid()}
    for entry in request["candidates"]:
        config = entry["candidate"]["config"]
        if config == "selftest_crash":
            os.abort()
        if config == "selftest_hang":
            time.sleep(3600)
        if config == "selftest_error":
            raise RuntimeError("CUDA error: an illegal memory access was encountered (self-test)")
        yield EvalResult(OK, us=10.0, baseline_us=11.0, case_speedups=[1.1], gpu={"gpu_name": "selftest"},
                         baseline_cases=doc)


class GpuEvaluator:
    """The judge on this process's GPU (imports torch and the extension; never loads a candidate library)."""

    def __init__(self):
        import torch  # noqa: PLC0415 (the self-test worker runs without torch's CUDA)

        from cudal2_ops._extension import _C  # noqa: PLC0415
        from cudal2_testing import kernel_timing  # noqa: PLC0415
        from cudal2_testing.correctness import checks  # noqa: PLC0415
        from cudal2_testing.measure import env as measure_env  # noqa: PLC0415
        from cudal2_testing.measure import timing  # noqa: PLC0415
        from cudal2_testing.correctness.inputs import GUARD_BYTES, integer_value_bound, random_inputs  # noqa: PLC0415
        from cudal2_testing.correctness.reference import DTYPES  # noqa: PLC0415
        from cudal2_testing.lt_baseline import AutotunedLt  # noqa: PLC0415
        from search import judge_timing, runner_client  # noqa: PLC0415
        from search.cuda_runtime import Runtime  # noqa: PLC0415
        if _C is None or not torch.cuda.is_available():
            raise RuntimeError("the evaluation worker needs the compiled extension and a CUDA GPU")
        self.torch, self._C, self.checks, self.timing = torch, _C, checks, timing
        self.jt, self.rc, self.rt = judge_timing, runner_client, Runtime()
        self.dtypes, self.guard_bytes, self.random_inputs = DTYPES, GUARD_BYTES, random_inputs
        self.integer_value_bound = integer_value_bound
        self.baseline = {layout: AutotunedLt(layout) for layout in ("nn", "nt")}  # choices kept per problem
        self.binary_checks = BinaryChecks()
        self.spin_cycles: int | None = None   # the brackets' spin, as the last candidate's bracket left it
        self.kept_runner = None   # the last batch's runner, kept after a config candidate passed (no regions mapped)
        self.check_memo: dict | None = None   # the batch's check inputs and references (its candidates run elsewhere)
        self.environment = kernel_timing.environment()
        self.environment["arch"] = self.environment["capability"][0] * 10 + self.environment["capability"][1]
        known_peak = os.environ.get(PEAK_ENV)
        self.peak_tflops = float(known_peak) if known_peak else measure_env.measure_roofline()["peak_tflops"]
        self.environment["peak_tflops"] = self.peak_tflops
        self.environment["evaluation"] = PROTOCOL
        self.environment["cublas"] = measure_env.cublas_version()
        self.environment["gpu_uuid"] = str(torch.cuda.get_device_properties(0).uuid)   # (the baseline's card)
        self.fingerprint = baseline_cache.fingerprint(self.environment, PROTOCOL)
        self.environment["baseline_fingerprint"] = self.fingerprint

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
            for i in range(self.jt.heat_runs(est_ms * 1e3, 1)):   # timed busy, as the candidate is
                call(i % sets.calls)
            times.append(self.timing.kernel_mode(call, sets.calls, est_ms, target_ms=self.jt.TARGET_MS,
                                                 cap=sets.calls, cold_cap=sets.calls)["median_us"])
            count = max(sets.calls, min(4096, math.ceil(EAGER_MS * 1e3 / max(times[-1], 1.0))))
            walls.append(self._wall_us(call, sets.calls, count))
        return times, walls

    # -- the candidate, through the runner -----------------------------------------------------------------------
    def _correctness(self, impl, problem: Problem, dtype, binary: tuple) -> None:
        """Raises a Verdict at the first failed check; a launch that declines (ABI status 1 or 2) is UNSUPPORTED,
        any other nonzero status a CRASH."""
        try:
            self._checks(impl, problem, dtype, binary)
        except self.rc.CandidateDeclined as declined:
            if declined.status in (1, 2):
                raise Verdict(UNSUPPORTED, f"the kernel declines the problem: {declined}") from None
            raise Verdict(CRASH, f"the launch failed: {declined}") from None

    def _checks(self, impl, problem: Problem, dtype, binary: tuple) -> None:
        """Every check on this problem, but the binary's own (small-K exact, stream) where the binary passed them
        before (`search.binary_checks`)."""
        checks, shape, known = self.checks, (problem.m, problem.n, problem.k), self.binary_checks
        ctx = checks.CheckContext(memo=self.check_memo)
        probe = self.random_inputs(shape, problem.layout, dtype, False, 7, ctx.device)
        impl(probe[0], probe[1], None, self.torch.empty(problem.m, problem.n, device="cuda", dtype=dtype))
        small_k_runs = self.integer_value_bound(problem.k) is not None   # else the check passes without a call
        for check in (checks.check_random, checks.check_exact, checks.check_exact_small_k, checks.check_guards):
            if check is checks.check_exact_small_k and known.passed(binary, "exact_small_k"):
                continue
            result = check(impl, shape, problem.layout, dtype, ctx)
            if not result.passed:
                raise Verdict(INCORRECT, f"{result.check} check: {result.detail}")
            if check is checks.check_exact_small_k and small_k_runs:
                known.record_pass(binary, "exact_small_k")
        if known.passed(binary, "stream"):
            return
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
        known.record_pass(binary, "stream")

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

    def _time_case(self, runner, bracket, sets, workspace, overhead_us: float, case: int, base_us: float,
                   base_wall_us: float, round_trip_s: float, flags: list[str]) -> tuple[float, float]:
        """(the candidate's us per call on one case (judge's events), the baseline's for the verdict); every output
        checked after every replay. On a problem of HEAT_MIN_US or more per call (`judge_timing.heat_runs`), both are
        timed busy and the baseline again before each of the candidate's replays, over the same sets, so that the
        two share the GPU's power state (its cached time is the verdict's baseline on shorter problems)."""
        jt = self.jt
        times, runner_times, base_times = [], [], []
        heat = jt.heat_runs(base_us, sets.calls)
        paired = heat > 0
        base_call = self._baseline_call(sets) if paired else None
        if heat:   # after the checks' and the capture's pauses: busy again, the graph replayed back to back in one
            error = runner.request("heat", replays=heat).get("error")   # request (not a bracket and round trips per
            if error:                                                    # replay, which left the GPU idle between)
                raise RunnerDied(CRASH, f"the candidate's kernel failed while heating the GPU: {error}")
        while jt.more_replays(times):
            rep = len(times)
            if paired:   # the baseline's replay of the same R calls, right before the candidate's (it writes D_i first)
                base_times.append(self.timing.estimate_ms(base_call, sets.calls, sets.calls) * 1e3)
            sets.poison()
            workspace.fill_(rep * 37 % 251)
            us, _ = bracket.measure("replay")   # (synchronizes this process's GPU work first)
            timed = runner.request("timed")
            if timed.get("error"):
                raise RunnerDied(CRASH, f"the candidate's kernel failed during replay {rep}: {timed['error']}")
            wrong = sets.wrong_outputs()
            if wrong:
                raise Verdict(INCORRECT, f"case {case}, timed replay {rep}: {wrong}: the work is not in the graph "
                                         f"captured on the caller's stream, or calls were skipped")
            times.append(us)
            runner_times.append(timed["us"])
        judged_us, runner_us = jt.per_call_us(times, overhead_us, runner_times, sets.calls)
        if judged_us > JUDGE_RUNNER_RATIO * runner_us + JUDGE_RUNNER_SLACK_US:
            flags.append(f"case {case}: the judge's events saw {judged_us:.2f} us per call, the runner's own "
                         f"{runner_us:.2f} us")
        cand_us = max(judged_us, runner_us)   # the runner's events bracket its graph alone: a floor it can only raise
        if case == 0:   # a launcher's host cost is the same on every case's data (the timed graph is one capture)
            self._check_wall_clock(runner, sets, cand_us, base_us, base_wall_us, round_trip_s, flags)
        return cand_us, statistics.median(base_times) if base_times else base_us

    def _check_wall_clock(self, runner, sets, cand_us: float, base_us: float, base_wall_us: float,
                          round_trip_s: float, flags: list[str]) -> None:
        """Flags a wall clock per eager call above `judge_timing.wall_clock_bound_us` (measured again before
        flagging: one slow batch of host jitter is no verdict)."""
        bound_us = self.jt.wall_clock_bound_us(cand_us, base_us, base_wall_us)
        wall_us = self._eager_wall_us(runner, sets, cand_us, base_wall_us, round_trip_s)
        if wall_us > bound_us:
            wall_us = min(wall_us, self._eager_wall_us(runner, sets, cand_us, base_wall_us, round_trip_s))
        if wall_us > bound_us:
            flags.append(f"wall clock {wall_us:.1f} us per eager call (median of {EAGER_BATCHES} batches, twice) vs "
                         f"{cand_us:.1f} us by the judge's events (baseline {base_us:.1f} us, wall clock "
                         f"{base_wall_us:.1f} us; bound {bound_us:.1f} us)")

    def _eager_wall_us(self, runner, sets, cand_us: float, base_wall_us: float, round_trip_s: float) -> float:
        """Median over EAGER_BATCHES batches of the wall clock here per eager call of the captured problems (less
        the runner's round trip), every output checked after each batch (the first case's inputs)."""
        count = max(sets.calls, min(4096, math.ceil(EAGER_MS * 1e3 / EAGER_BATCHES / max(cand_us, base_wall_us, 1.0))))
        walls = []
        for _ in range(EAGER_BATCHES):
            sets.poison()
            self.torch.cuda.synchronize()
            start = time.perf_counter()
            answer = runner.request("eager", calls=count)
            walls.append(max(time.perf_counter() - start - round_trip_s, 0.0) * 1e6 / count)
            if answer.get("error"):
                raise RunnerDied(CRASH, f"the candidate's kernel failed in eager calls: {answer['error']}")
            wrong = sets.wrong_outputs()
            if answer.get("nonzero") or wrong:
                raise Verdict(INCORRECT, f"case 0, {count} eager calls: {wrong or 'nonzero launch statuses'}")
        return statistics.median(walls)

    @staticmethod
    def _round_trip_s(runner) -> float:
        """The median time of an empty request to the runner and back."""
        pings = []
        for _ in range(5):
            start = time.perf_counter()
            runner.request("ping")
            pings.append(time.perf_counter() - start)
        return statistics.median(pings)

    def _keep_runner(self, runner) -> None:
        """Keeps `runner` (its last candidate, a config candidate, passed) for the next batch, its regions closed on
        its side first; a runner that cannot close them is killed."""
        try:
            kept = runner.unmap()
        except RunnerDied:
            return   # (the client killed it)
        if kept:
            self.kept_runner = runner
        else:
            runner.close()

    def _kept_runner_for(self, regions, timeout: float):
        """The runner kept from the previous batch with this batch's regions mapped, or None (a fresh one starts):
        starting a runner process and its CUDA context, and killing it, cost about as much as judging the
        candidate."""
        runner, self.kept_runner = self.kept_runner, None
        if runner is None:
            return None
        try:
            runner.map(regions, timeout)
        except LookupError:
            runner.close()
            return None
        except RunnerDied:
            return None   # (the client killed it)
        return runner

    def _runner(self, runner, artifact: str, cand: Candidate, regions, timeout: float):
        """The runner for `cand`: `runner` (the batch's previous config candidate passed every check in it) with
        `cand`'s kernel loaded, else a fresh process. LookupError when the kernel cannot be loaded."""
        if runner is None:
            return self.rc.RunnerClient(artifact, cand.kernel_name, regions, timeout)
        try:
            runner.load(artifact, cand.kernel_name)
        except LookupError:
            runner.close()
            raise
        return runner

    def _judge(self, artifact: str, cand: Candidate, problem: Problem, dtype, regions, sets, seeds, base_us,
               base_wall, timeout: float, runner) -> tuple[EvalResult, object]:
        """(verdict on `cand`, the runner to reuse for the batch's next candidate or None). `runner` is the one the
        previous candidate left; it is kept only after an OK verdict on a config candidate (codegen's code, not the
        search's: a search-written source never shares its process with another candidate)."""
        rc, jt = self.rc, self.jt
        try:
            runner = self._runner(runner, artifact, cand, regions, timeout)
        except LookupError as exc:
            return EvalResult(UNSUPPORTED, reason=f"cannot load {cand.kernel_name} from {artifact}: {exc}"), None
        keep = False
        try:
            kernel = runner.kernel
            if (kernel["abi_version"] != 1 or kernel["dtype"] != rc.DTYPE_CODES[dtype]
                    or kernel["layout"] != rc.LAYOUT_CODES[problem.layout]):
                return EvalResult(UNSUPPORTED, reason=f"kernel {cand.kernel_name} ({kernel}) is not for "
                                                      f"{problem.dtype} {problem.layout} (ABI 1)"), None
            if not kernel.get("pdl_disabled"):
                raise RuntimeError("the candidate runner started with PDL on (CUDAL2_DISABLE_PDL=1 did not reach it)")
            knobs = tuple(cand.knobs)
            impl = rc.RunnerImpl(runner, regions[1], 1, problem.layout, knobs, WORKSPACE_LIMIT)
            binary = self.binary_checks.binary(artifact, cand.kernel_name, problem.layout, problem.dtype)
            self._correctness(impl, problem, dtype, binary)
            specs = sets.specs(knobs, None, 0)
            workspace_bytes = int(runner.request("query", problem=specs[0])["workspace"])
            if workspace_bytes > WORKSPACE_LIMIT:
                return EvalResult(UNSUPPORTED, reason=f"needs {workspace_bytes} bytes of workspace; the library "
                                                      f"gives {WORKSPACE_LIMIT}"), None
            specs = sets.specs(knobs, [2, 0], workspace_bytes)
            flags: list[str] = []
            cand_us, case_base_us, errs = [], [], []
            bracket = jt.Bracket(runner, self.spin_cycles)
            self._capture(runner, sets, specs)
            if runner.overhead_us is None:   # the empty bracket: once per runner and batch (no kernel in it)
                runner.overhead_us = bracket.overhead_us()   # (each bracket waits for this process's GPU work first)
            overhead_us = runner.overhead_us
            round_trip_s = self._round_trip_s(runner)
            for case, seed in enumerate(seeds):
                sets.fill(seed)   # (the case's fp32 references: computed for the batch's first candidate only)
                case_us, case_base = self._time_case(runner, bracket, sets, regions[2].tensor, overhead_us, case,
                                                     base_us[case], base_wall[case], round_trip_s, flags)
                cand_us.append(case_us)
                case_base_us.append(case_base)
                errs.append(sets.max_error())
                if jt.screened(case_us, case_base):
                    break   # a clear loser: its other cases change nothing
            self.spin_cycles = bracket.cycles
            us = statistics.median(cand_us)
            floor_us = 2 * problem.m * problem.n * problem.k / (self.peak_tflops * 1e6)
            if us < ROOFLINE_MARGIN * floor_us:
                flags.append(f"{us:.2f} us is below {ROOFLINE_MARGIN} x the compute floor {floor_us:.2f} us "
                             f"({self.peak_tflops:.0f} TFLOP/s measured)")
            keep = bool(cand.config) and not flags
        finally:
            if not keep:
                runner.close()
        return EvalResult(SUSPICIOUS if flags else OK, us=us, baseline_us=statistics.median(case_base_us),
                          case_speedups=[b / max(c, 1e-9) for b, c in zip(case_base_us, cand_us)],
                          max_rel_err=max(errs),
                          reason="; ".join(flags), gpu=self.environment), runner if keep else None

    def judge(self, request: dict) -> Iterator[EvalResult]:
        """The verdicts on a batch of candidates for one problem, in order (request: {"problem", "candidates":
        [{"candidate", "artifact"}], "cases", "timeout_s", "baseline"}). One set of judge-owned buffers for the
        batch; the baseline timed once per case on the problem's case seeds, or taken from request["baseline"] when
        that was timed under this judge's fingerprint (search.baseline_cache); each candidate through every check
        and its own captured graph, in one runner process kept across config candidates that pass. A RunnerDied
        (CRASH / HANG) ends the batch: the caller restarts this process and re-sends the rest."""
        jt, rc = self.jt, self.rc
        problem = Problem(**request["problem"])
        dtype = self.dtypes[problem.dtype]
        cases = request.get("cases", 3)
        doc = request.get("baseline")
        if not baseline_cache.valid(doc, self.fingerprint, problem.key, cases):
            doc = None   # (timed with the kept runner idle: starting and killing one cost as much as the batch)
        m, n, k = problem.m, problem.n, problem.k
        calls = int(doc["calls"]) if doc else jt.TimingSets.calls_for(m, n, k, dtype,
                                                                      self._baseline_estimate_us(problem, dtype))
        a_bytes, b_bytes, d_bytes = jt.TimingSets.set_bytes(m, n, k, dtype)
        guards = 8 * (self.guard_bytes + rc.ALIGN)
        regions = [rc.SharedRegion(self.rt, jt.TimingSets.region_bytes(m, n, k, dtype, calls)),
                   rc.SharedRegion(self.rt, a_bytes + b_bytes + d_bytes + WORKSPACE_LIMIT + guards),
                   rc.SharedRegion(self.rt, WORKSPACE_LIMIT)]
        sets = jt.TimingSets(regions[0], 0, m, n, k, problem.layout, dtype, calls)
        seeds = baseline_cache.case_seeds(problem.key, cases)
        timeout = max(5.0, float(request.get("timeout_s", 300.0)) / 3)
        if doc is None:
            base_us, base_wall = self._baselines(sets, seeds)
            doc = {"fingerprint": self.fingerprint, "problem": problem.key, "calls": calls, "seeds": seeds,
                   "us": base_us, "wall_us": base_wall}
        runner = self._kept_runner_for(regions, timeout)
        self.check_memo = {}   # every candidate of the batch is checked on the same inputs: references made once
        for entry in request["candidates"]:
            cand = Candidate.from_json(entry["candidate"])
            try:
                result, runner = self._judge(entry["artifact"], cand, problem, dtype, regions, sets, seeds,
                                             doc["us"], doc["wall_us"], timeout, runner)
            except Verdict as verdict:
                result, runner = verdict.result, None   # (_judge closed the runner)
            result.baseline_cases = doc
            yield result
        # (after RunnerDied the regions are left to the process's exit: a stream may wait on the dead runner)
        if runner is not None:   # a config candidate passed last: the runner is kept for the next batch
            self._keep_runner(runner)
        self.check_memo = None
        del sets
        for region in regions:
            region.close()


def serve(judge, environment: dict, requests, replies) -> None:
    """Answers each request line (a batch of candidates for one problem) with one line per candidate, in order:
    {"result": EvalResult, "restart": bool}. A Python error while judging a candidate is a CRASH verdict on it with
    the error as the reason; a runner that died, hung or faulted gives its CRASH / HANG. In both cases this process
    then stops (its CUDA state may be unusable), `restart` tells the parent to start a fresh one, and the batch's
    later candidates get no line (the parent sends them again)."""
    replies.write(json.dumps({"ready": True, "environment": environment}) + "\n")
    replies.flush()
    for line in requests:
        request = json.loads(line)
        verdicts = judge(request)
        mark = time.monotonic()
        for _ in request["candidates"]:
            failed = False
            try:
                result = next(verdicts)
            except RunnerDied as died:
                result = EvalResult(died.status, reason=str(died)[-2000:])
                failed = True
            except Exception as exc:  # noqa: BLE001 (any error of one candidate is that candidate's verdict)
                result = EvalResult(CRASH, reason=f"evaluation error: {type(exc).__name__}: {exc}"[-2000:])
                failed = True
            now = time.monotonic()
            result.eval_s, mark = now - mark, now
            replies.write(json.dumps({"result": dataclasses.asdict(result), "restart": failed}) + "\n")
            replies.flush()
            if failed:
                return
        for _ in verdicts:   # the batch's clean-up (buffers freed)
            pass


def main() -> None:
    # Replies go on a private copy of stdout; fd 1 is pointed at stderr so that prints (C or Python) cannot corrupt
    # the protocol. Rewards are measured with PDL off; no candidate library is loaded into this process.
    os.environ[PDL_ENV] = "1"
    os.environ.pop("CUDAL2_KERNEL_LIBS", None)
    replies = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    if os.environ.get(SELFTEST_ENV) == "1":
        serve(selftest_judge, {"gpu_name": "selftest", "arch": 0, "pdl_disabled": os.environ[PDL_ENV] == "1",
                               "baseline_fingerprint": SELFTEST_FINGERPRINT}, sys.stdin, replies)
        return
    evaluator = GpuEvaluator()
    serve(evaluator.judge, evaluator.environment, sys.stdin, replies)


if __name__ == "__main__":
    main()
