"""The judge's binary-level checks (small-K exact, stream) run once per (library content, kernel, layout, dtype),
and its per-case timing decisions (the runner's floor, the wall clock measured again before a flag), on CPU with
fake checks, runner and bracket in place of the GPU."""
from __future__ import annotations

import time
import types

import pytest

from cudal2_testing.correctness.checks import CheckResult
from cudal2_testing.correctness.inputs import integer_value_bound
from search import judge_timing
from search.binary_checks import BinaryChecks
from search.candidate import Problem
from search.eval_worker import GpuEvaluator, Verdict

PROBLEM = Problem("nt", "fp16", 64, 64, 256)


def test_a_pass_is_kept_for_the_same_binary_only(tmp_path):
    lib = tmp_path / "lib.so"
    lib.write_bytes(b"kernels v1")
    known = BinaryChecks()
    key = known.binary(str(lib), "k", "nt", "fp16")
    assert not known.passed(key, "stream")
    known.record_pass(key, "stream")
    assert known.passed(known.binary(str(lib), "k", "nt", "fp16"), "stream")
    assert not known.passed(known.binary(str(lib), "other_kernel", "nt", "fp16"), "stream")
    assert not known.passed(known.binary(str(lib), "k", "nn", "fp16"), "stream")
    assert not known.passed(known.binary(str(lib), "k", "nt", "bf16"), "stream")
    assert not known.passed(key, "exact_small_k")
    lib.write_bytes(b"kernels v2, rebuilt")
    assert not known.passed(known.binary(str(lib), "k", "nt", "fp16"), "stream")


class FakeImpl:
    synchronous = True

    def __init__(self):
        self.runner = types.SimpleNamespace(request=lambda op, **fields: {})

    def __call__(self, a, b, bias, out):
        return out


def fake_judge(fail: str = "") -> tuple[GpuEvaluator, list[str]]:
    """A judge whose checks only log their names (and `fail` fails)."""
    ran: list[str] = []

    def check(name):
        def run(impl, shape, layout, dtype, ctx):
            ran.append(name)
            return CheckResult(name, tuple(shape), layout, "fp16", name != fail, "detail")
        return run

    judge = object.__new__(GpuEvaluator)
    judge.check_memo = None
    judge.checks = types.SimpleNamespace(CheckContext=lambda memo: types.SimpleNamespace(device="cpu", memo=memo),
                                         **{f"check_{n}": check(n) for n in
                                            ("random", "exact", "exact_small_k", "guards", "stream")})
    judge.random_inputs = lambda *args: (None, None, None)
    judge.torch = types.SimpleNamespace(empty=lambda *args, **kw: None)
    judge.integer_value_bound = integer_value_bound
    judge.binary_checks = BinaryChecks()
    return judge, ran


def test_the_binary_checks_run_once_per_binary(tmp_path):
    assert integer_value_bound(PROBLEM.k) is not None
    judge, ran = fake_judge()
    lib, other = tmp_path / "a.so", tmp_path / "b.so"
    lib.write_bytes(b"one")
    other.write_bytes(b"two")
    every = ["random", "exact", "exact_small_k", "guards", "stream"]
    per_problem = ["random", "exact", "guards"]

    def judged(library, kernel="k", problem=PROBLEM):
        ran.clear()
        binary = judge.binary_checks.binary(str(library), kernel, problem.layout, problem.dtype)
        judge._checks(FakeImpl(), problem, "fp16", binary)
        return list(ran)

    assert judged(lib) == every
    assert judged(lib, problem=Problem("nt", "fp16", 128, 32, 512)) == per_problem   # another problem, same binary
    assert judged(other) == every                                                    # a new binary
    assert judged(lib, kernel="k2") == every                                         # another kernel of the library
    lib.write_bytes(b"one, rebuilt")
    assert judged(lib) == every                                                      # its content changed


def test_a_failed_or_skipped_check_is_not_recorded(tmp_path):
    lib = tmp_path / "a.so"
    lib.write_bytes(b"one")
    judge, ran = fake_judge(fail="stream")
    binary = judge.binary_checks.binary(str(lib), "k", "nt", "fp16")
    with pytest.raises(Verdict):
        judge._checks(FakeImpl(), PROBLEM, "fp16", binary)
    assert judge.binary_checks.passed(binary, "exact_small_k") and not judge.binary_checks.passed(binary, "stream")
    deep = Problem("nt", "fp16", 64, 64, 65536)      # small-K check passes without a call at this depth
    judge, ran = fake_judge()
    judge._checks(FakeImpl(), deep, "fp16", binary)
    assert not judge.binary_checks.passed(binary, "exact_small_k") and judge.binary_checks.passed(binary, "stream")


class FakeSets:
    calls = 4

    def poison(self):
        pass

    def wrong_outputs(self):
        return ""


class ScriptedRunner:
    """Answers "timed" with `runner_us` per replay and sleeps through "eager" at the scripted us per call."""

    def __init__(self, runner_us: float, eager_us: list[float]):
        self.runner_us, self.eager_us, self.eager_batches = runner_us, list(eager_us), 0

    def request(self, op, **fields):
        if op == "timed":
            return {"us": self.runner_us}
        if op == "eager":
            per_call = self.eager_us.pop(0) if len(self.eager_us) > 1 else self.eager_us[0]
            self.eager_batches += 1
            time.sleep(per_call * fields["calls"] * 1e-6)
            return {"nonzero": 0}
        return {}


def time_case(judge_us: float, runner: ScriptedRunner, base_us=2.0, base_wall_us=10.0,
              case: int = 0) -> tuple[float, list[str]]:
    judge = object.__new__(GpuEvaluator)
    judge.jt = judge_timing
    judge.torch = types.SimpleNamespace(cuda=types.SimpleNamespace(synchronize=lambda: None))
    bracket = types.SimpleNamespace(measure=lambda op: (judge_us, {}))
    flags: list[str] = []
    workspace = types.SimpleNamespace(fill_=lambda value: None)
    us, case_base_us = judge._time_case(runner, bracket, FakeSets(), workspace, 0.0, case, base_us, base_wall_us,
                                        0.0, flags)
    assert case_base_us == base_us   # a short problem: the cached baseline is the verdict's
    return us, flags


def test_the_time_is_never_below_the_runners_own():
    us, flags = time_case(judge_us=40.0, runner=ScriptedRunner(runner_us=80.0, eager_us=[20.0]))
    assert us == pytest.approx(20.0) and flags == []          # 80 us / 4 calls, not the judge's 10 us


def test_one_slow_eager_batch_is_not_a_verdict():
    runner = ScriptedRunner(runner_us=40.0, eager_us=[400.0, 20.0, 20.0])
    us, flags = time_case(judge_us=40.0, runner=runner)
    assert flags == [] and runner.eager_batches == 3


def test_eager_calls_slower_on_every_measurement_are_flagged():
    runner = ScriptedRunner(runner_us=40.0, eager_us=[400.0])
    us, flags = time_case(judge_us=40.0, runner=runner)
    assert runner.eager_batches == 6 and len(flags) == 1 and "wall clock" in flags[0], flags


def test_the_wall_clock_is_checked_on_the_first_case_only():
    runner = ScriptedRunner(runner_us=40.0, eager_us=[400.0])   # would be flagged on the first case
    us, flags = time_case(judge_us=40.0, runner=runner, case=1)
    assert runner.eager_batches == 0 and flags == [] and us == pytest.approx(10.0)
