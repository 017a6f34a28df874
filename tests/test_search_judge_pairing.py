"""The judge's timed case on CPU (`GpuEvaluator._time_case` with a scripted runner, bracket, buffer sets and
timer): on a long problem the GPU is kept busy first and the baseline is timed again right before each of the
candidate's replays, and the verdict's baseline is that paired time; on a short problem the cached baseline stands."""
from __future__ import annotations

import types

import pytest

from search import eval_worker, judge_timing


class Script:
    """The fake GPU side of one case: a log of what ran, in order, and the times it reports."""

    def __init__(self, cand_us_per_call: float, base_ms_per_call: list[float], calls: int):
        self.log: list[str] = []
        self.cand_us, self.base_ms, self.calls = cand_us_per_call, list(base_ms_per_call), calls

    # the runner
    def request(self, op: str, **fields) -> dict:
        if op == "heat":
            self.log += ["heat"] * fields["replays"]
            return {"error": ""}
        assert op == "timed"
        return {"us": self.cand_us * self.calls}

    # the bracket
    def measure(self, op: str, **fields) -> tuple[float, dict]:
        self.log.append("candidate")
        return self.cand_us * self.calls, {}

    # the buffer sets
    def poison(self) -> None:
        self.log.append("poison")

    def wrong_outputs(self) -> list:
        return []

    # the timer (cudal2_testing.measure.timing)
    def estimate_ms(self, call, n_sets: int, calls: int = 3) -> float:
        for i in range(calls):
            call(i % n_sets)
        self.log.append("baseline")
        return self.base_ms.pop(0) if len(self.base_ms) > 1 else self.base_ms[0]


def judge_with(script: Script) -> eval_worker.GpuEvaluator:
    judge = eval_worker.GpuEvaluator.__new__(eval_worker.GpuEvaluator)
    judge.jt, judge.timing = judge_timing, script
    judge._baseline_call = lambda sets: (lambda i: None)
    judge._eager_wall_us = lambda *args: 0.0
    return judge


def time_case(script: Script, cached_base_us: float) -> tuple[float, float]:
    sets = types.SimpleNamespace(calls=script.calls, poison=script.poison, wrong_outputs=script.wrong_outputs)
    workspace = types.SimpleNamespace(fill_=lambda value: None)
    return judge_with(script)._time_case(script, script, sets, workspace, 0.0, 0, cached_base_us, 0.0, 0.0, [])


def test_a_long_problem_is_judged_against_its_baseline_timed_beside_each_replay():
    script = Script(cand_us_per_call=3000.0, base_ms_per_call=[3.3, 3.2, 3.1], calls=1)
    cand_us, base_us = time_case(script, cached_base_us=2900.0)
    assert cand_us == pytest.approx(3000.0)
    assert base_us == pytest.approx(3200.0)              # the paired replays' median, not the cached 2900
    heat = judge_timing.heat_runs(2900.0, 1)
    timed = script.log[heat:]
    assert heat > 0 and script.log[:heat] == ["heat"] * heat   # busy first: the graph replayed back to back
    assert timed[:3] == ["baseline", "poison", "candidate"]          # each replay right after the baseline's
    assert timed.count("baseline") == timed.count("candidate") == judge_timing.MIN_REPS


def test_a_short_problem_keeps_the_cached_baseline():
    script = Script(cand_us_per_call=10.0, base_ms_per_call=[0.5], calls=64)
    cand_us, base_us = time_case(script, cached_base_us=12.0)
    assert base_us == 12.0 and cand_us == pytest.approx(10.0)
    assert "baseline" not in script.log and script.log[:2] == ["poison", "candidate"]


def test_a_kernel_that_fails_while_heating_is_a_crash():
    script = Script(cand_us_per_call=3000.0, base_ms_per_call=[3.0], calls=1)
    script.request = lambda op, **fields: {"error": "an illegal memory access was encountered"}
    with pytest.raises(eval_worker.RunnerDied, match="while heating"):
        time_case(script, cached_base_us=2900.0)


@pytest.mark.parametrize("base_us", [judge_timing.HEAT_MIN_US * 10, judge_timing.HEAT_MIN_US / 20])
def test_a_clear_loser_is_judged_on_its_first_case_whatever_the_problem_size(base_us):
    assert judge_timing.screened(cand_us=base_us / judge_timing.SCREEN_SPEEDUP * 1.01, base_us=base_us)
    assert not judge_timing.screened(cand_us=base_us / judge_timing.SCREEN_SPEEDUP * 0.99, base_us=base_us)
    assert not judge_timing.screened(cand_us=base_us * 1.1, base_us=base_us)   # near the bar: all its cases
