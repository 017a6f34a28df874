"""The judge's timed loop on CPU: buffer sets and their fp32 references (computed once per case seed, checked in one
pass), and the bracket's order of work (the judge's own GPU work finished before a bracket starts), with a fake
torch.cuda where a GPU would be needed."""
from __future__ import annotations

import contextlib
import types

import pytest
import torch

from cudal2_testing.correctness.reference import reference
from search import judge_timing
from search.judge_timing import Bracket, TimingSets
from search.runner_client import SharedRegion


class CpuRegion:
    """A SharedRegion's views over a CPU byte tensor."""

    view = SharedRegion.view

    def __init__(self, nbytes: int):
        self.nbytes = nbytes
        self.tensor = torch.zeros(nbytes, dtype=torch.uint8)


def cpu_sets(m=24, n=16, k=40, layout="nt", calls=5) -> TimingSets:
    region = CpuRegion(TimingSets.region_bytes(m, n, k, torch.float16, calls))
    return TimingSets(region, 0, m, n, k, layout, torch.float16, calls)


def write_correct_outputs(sets: TimingSets) -> None:
    for a, d in zip(sets.a, sets.d):
        d.copy_(reference(a, sets.b, sets.layout).to(d.dtype))


@pytest.mark.parametrize("layout", ["nn", "nt"])
def test_references_are_those_of_each_set(layout):
    sets = cpu_sets(layout=layout)
    sets.fill(11)
    for i, a in enumerate(sets.a):
        expected = reference(a, sets.b, layout).flatten()
        assert torch.allclose(sets.refs[i], expected, rtol=1e-6, atol=1e-5)
    write_correct_outputs(sets)
    assert sets.wrong_outputs() == "" and sets.max_error() < 1e-3


def test_a_seed_gives_the_same_sets_and_another_seed_others():
    first, second = cpu_sets(), cpu_sets()
    first.fill(3)
    second.fill(3)
    assert torch.equal(first.region.tensor, second.region.tensor)
    second.fill(4)
    assert not torch.equal(first.a_block, second.a_block) and not torch.equal(first.b, second.b)


def test_each_wrong_or_unwritten_output_is_named():
    sets = cpu_sets()
    sets.fill(5)
    sets.poison()
    assert sets.wrong_outputs().startswith(f"{sets.calls} of {sets.calls} outputs wrong")
    write_correct_outputs(sets)
    sets.d[3][2, 1] += 40.0
    assert sets.wrong_outputs().startswith(f"1 of {sets.calls} outputs wrong (first: call 3")
    sets.d[3].copy_(reference(sets.a[3], sets.b, sets.layout).to(torch.float16))
    sets.d[4].fill_(float("nan"))    # NaN fails the tolerance (no comparison with NaN is true)
    assert "first: call 4" in sets.wrong_outputs()


def test_references_are_computed_once_per_case_seed(monkeypatch):
    sets = cpu_sets()
    computed = []
    original = TimingSets._fp32_references

    def counting(self):
        computed.append(1)
        return original(self)

    monkeypatch.setattr(TimingSets, "_fp32_references", counting)
    for _candidate in range(3):          # a batch of three candidates, two cases each
        for seed in (1, 2):
            sets.fill(seed)
            write_correct_outputs(sets)
            assert sets.wrong_outputs() == ""
    assert len(computed) == 2
    sets.fill(9, references=False)       # the baseline's fill: no references, none computed
    assert sets.refs is None and len(computed) == 2


def test_the_reference_cache_is_bounded(monkeypatch):
    sets = cpu_sets()
    monkeypatch.setattr(judge_timing, "REF_CACHE_BUDGET", sets.calls * sets.m * sets.n * 4)   # room for one case
    sets.fill(1)
    sets.fill(2)
    assert list(sets._references) == [2]


class FakeCuda:
    """What Bracket.measure uses of torch.cuda, logging the order of the judge's work."""

    def __init__(self, late_first: int = 0, elapsed_ms: list[float] | None = None):
        self.log: list[str] = []
        self.late = late_first
        self.elapsed = list(elapsed_ms or [])
        cuda = self

        class Event:
            def __init__(self, enable_timing=False, interprocess=False):
                self.timing = enable_timing

            def record(self, stream=None):
                cuda.log.append("record")

            def query(self):
                if cuda.late:
                    cuda.late -= 1
                    return True
                return False

            def elapsed_time(self, end):
                return cuda.elapsed.pop(0) if cuda.elapsed else 1.0

        self.Event = Event

    def synchronize(self):
        self.log.append("sync")

    def _sleep(self, cycles):
        self.log.append(f"spin {cycles}")

    @staticmethod
    def stream(_):
        return contextlib.nullcontext()


class FakeRunner:
    def __init__(self, cuda: FakeCuda):
        self.cuda = cuda
        self.go, self.done = cuda.Event(), cuda.Event()

    def request(self, op, **fields):
        self.cuda.log.append(op)
        return {}


def fake_bracket(monkeypatch, cuda: FakeCuda, cycles: int = 100) -> Bracket:
    monkeypatch.setattr(judge_timing, "torch", types.SimpleNamespace(cuda=cuda))
    monkeypatch.setattr(judge_timing, "wait_event", lambda event, runner: None)
    bracket = object.__new__(Bracket)
    bracket.runner, bracket.cycles, bracket.base = FakeRunner(cuda), cycles, cycles
    bracket.stream = types.SimpleNamespace(wait_event=lambda event: cuda.log.append("wait done"))
    return bracket


def test_a_bracket_starts_after_the_judges_own_gpu_work(monkeypatch):
    """The judge's queued work (a case's fills and references) must not run inside a bracket: the GPU would switch
    between the judge's and the runner's contexts there, and an empty bracket so measured, subtracted from every
    replay, made honest kernels faster than the GPU's peak (96.9 us for 195 us of work on an H100)."""
    cuda = FakeCuda()
    bracket = fake_bracket(monkeypatch, cuda)
    bracket.measure("replay")
    assert cuda.log.index("sync") < cuda.log.index("spin 100") < cuda.log.index("replay")


def test_the_empty_bracket_is_the_least_of_its_measurements(monkeypatch):
    cuda = FakeCuda(elapsed_ms=[0.050, 0.012, 0.900, 0.013, 0.011])
    bracket = fake_bracket(monkeypatch, cuda)
    assert bracket.overhead_us() == pytest.approx(11.0)


def test_a_spin_found_too_short_is_lengthened_then_shrinks_back(monkeypatch):
    """A late bracket is measured again with twice the spin; each bracket the spin covered shrinks it by
    SPIN_DECAY, never below the first spin, so one slow round trip does not lengthen every later bracket."""
    cuda = FakeCuda(late_first=2)
    bracket = fake_bracket(monkeypatch, cuda, cycles=100)
    bracket.measure("replay")
    assert cuda.log.count("replay") == 3 and bracket.cycles == int(400 * judge_timing.SPIN_DECAY)
    bracket.measure("replay")
    assert f"spin {int(400 * judge_timing.SPIN_DECAY)}" in cuda.log[-8:] and cuda.log.count("replay") == 4
    for _ in range(100):
        bracket.measure("replay")
    assert bracket.cycles == 100


def test_replays_are_sized_by_time():
    assert judge_timing.more_replays([]) and judge_timing.more_replays([5000.0] * (judge_timing.MIN_REPS - 1))
    assert not judge_timing.more_replays([5000.0] * judge_timing.MIN_REPS)      # long replays: the minimum
    short = [100.0] * judge_timing.MIN_REPS
    assert judge_timing.more_replays(short)                                      # short ones: up to the budget
    assert not judge_timing.more_replays([100.0] * judge_timing.MAX_REPS)


def test_long_problems_are_timed_after_running_busy_for_a_while():
    assert judge_timing.heat_runs(judge_timing.HEAT_MIN_US / 2, 1) == 0             # short problems: no wait
    runs = judge_timing.heat_runs(3000.0, 2)                                      # 3 ms calls, 2 per replay
    assert runs * 2 * 3000.0 >= judge_timing.HEAT_MS * 1e3 > (runs - 1) * 2 * 3000.0
    assert judge_timing.heat_runs(judge_timing.HEAT_MIN_US, 0) >= 1


def test_the_wall_clock_bound_allows_the_baselines_host_cost():
    bound = judge_timing.wall_clock_bound_us(cand_us=3.5, base_us=2.5, base_wall_us=12.6)
    assert bound == pytest.approx(judge_timing.WALL_RATIO * (3.5 + 10.1) + judge_timing.WALL_SLACK_US)
    bound = judge_timing.wall_clock_bound_us(cand_us=0.5, base_us=2.5, base_wall_us=12.6)
    assert bound == pytest.approx(judge_timing.WALL_RATIO * 12.6 + judge_timing.WALL_SLACK_US)
    bound = judge_timing.wall_clock_bound_us(cand_us=81.8, base_us=50.2, base_wall_us=53.1)
    assert bound == pytest.approx(judge_timing.WALL_RATIO * (81.8 + 2.9) + judge_timing.WALL_SLACK_US)
