"""The graph timer's call-count correction (cudal2_ops.graph_timing.sized_replay_us), on a model of a replay: each
replay costs a fixed launch latency plus R calls, so a replay of few calls overstates the per-call time."""
import pytest

from cudal2_ops import graph_timing

TRUE_US, LAUNCH_US = 4.0, 60.0


@pytest.fixture
def modelled_replays(monkeypatch):
    """replay_us replaced by the model; records the call counts it was asked for."""
    asked = []

    def replay_us(call, n_sets, calls, replays, stream):
        asked.append(calls)
        return [TRUE_US + LAUNCH_US / calls] * replays

    monkeypatch.setattr(graph_timing, "replay_us", replay_us)
    return asked


def test_a_too_small_count_is_resized_from_the_graphs_own_time(modelled_replays):
    per_call, calls = graph_timing.sized_replay_us(None, 1, 3, 5, None, target_us=1000.0, cap=256)
    assert modelled_replays[0] == 3 and calls > 3 * 10
    assert per_call[0] < 1.1 * TRUE_US  # the 3-call replay said 24 us


def test_a_count_that_fills_the_replay_is_kept(modelled_replays):
    per_call, calls = graph_timing.sized_replay_us(None, 1, 200, 5, None, target_us=1000.0, cap=256)
    assert (modelled_replays, calls) == ([200], 200)


def test_the_cap_and_the_input_sets_bound_the_count(modelled_replays):
    _, calls = graph_timing.sized_replay_us(None, 8, 8, 5, None, target_us=100000.0, cap=64)
    assert calls == 64 and max(modelled_replays) == 64
    modelled_replays.clear()
    _, calls = graph_timing.sized_replay_us(None, 8, 64, 5, None, target_us=100000.0, cap=64)
    assert modelled_replays == [64]


def test_at_most_three_rounds(modelled_replays):
    graph_timing.sized_replay_us(None, 1, 1, 5, None, target_us=1e9, cap=10**9)
    assert len(modelled_replays) == 3 and modelled_replays == sorted(modelled_replays)


class Graph:
    """A captured graph as interleaved_us sees it: records when it was timed."""

    def __init__(self, name, log, us):
        self.name, self.log, self.us = name, log, us

    def time(self, replays):
        self.log.append(self.name)
        return [self.us] * replays


def test_graphs_are_timed_in_rounds_each_starting_one_place_later():
    log = []
    graphs = {name: Graph(name, log, us) for name, us in (("a", 1.0), ("b", 2.0), ("c", 3.0))}
    samples = graph_timing.interleaved_us(graphs, rounds=3, replays=4)
    assert log == ["a", "b", "c", "b", "c", "a", "c", "a", "b"]   # each graph first once, never always after another
    assert samples == {"a": [1.0] * 12, "b": [2.0] * 12, "c": [3.0] * 12}
    assert graph_timing.interleaved_us({}, rounds=3, replays=4) == {}


def test_kernel_mode_times_a_problems_implementations_together(monkeypatch):
    from cudal2_testing.measure import timing

    log, allocated = [], [0]

    class Captured:
        def __init__(self, call, n_sets, calls, stream):
            if call == "broken":
                raise RuntimeError("operation not permitted when stream is capturing")
            self.name, self.calls = call, calls
            allocated[0] += {"x": 3 << 20, "y": 0}[call]   # X's graph keeps 3 MiB of its pool

        def time(self, replays):
            log.append(self.name)
            return [{"x": 2.0, "y": 3.0}[self.name]] * replays

    monkeypatch.setattr(graph_timing, "CapturedCalls", Captured)
    monkeypatch.setattr(timing.torch.cuda, "Stream", lambda: None)
    monkeypatch.setattr(timing.torch.cuda, "memory_reserved", lambda: allocated[0])
    timed, errors = timing.kernel_mode_interleaved({"X": "x", "Y": "y", "Z": "broken"}, 1, {"X": 8, "Y": 16, "Z": 4},
                                                   rounds=2, reps=5)
    assert log == ["x", "y", "y", "x"] and list(errors) == ["Z"]
    assert timed["X"]["median_us"] == 2.0 and timed["X"]["samples"] == 10 and timed["X"]["calls_per_replay"] == 8
    assert timed["Y"]["calls_per_replay"] == 16
    assert (timed["X"]["graph_mib"], timed["Y"]["graph_mib"]) == (3, 0)   # which graph holds memory, in the row


def test_a_graph_out_of_memory_beside_the_others_is_timed_alone(monkeypatch):
    from cudal2_testing.measure import timing

    alive, captures, cleared = set(), [], []

    class Captured:
        def __init__(self, call, n_sets, calls, stream):
            captures.append(call)
            self.name, self.calls = call, calls
            if call == "big" and alive - {"big"}:   # fits only once the other graphs are gone
                raise timing.torch.cuda.OutOfMemoryError("CUDA out of memory. Tried to allocate 288.00 MiB")
            if call == "broken":
                raise RuntimeError("operation not permitted when stream is capturing")
            alive.add(call)

        def __del__(self):
            alive.discard(self.name)

        def time(self, replays):
            return [{"small": 2.0, "big": 5.0}[self.name]] * replays

    monkeypatch.setattr(graph_timing, "CapturedCalls", Captured)
    monkeypatch.setattr(timing.torch.cuda, "Stream", lambda: None)
    monkeypatch.setattr(timing.torch.cuda, "memory_reserved", lambda: 0)
    monkeypatch.setattr(timing.torch.cuda, "empty_cache", lambda: cleared.append(True))
    timed, errors = timing.kernel_mode_interleaved({"S": "small", "B": "big", "X": "broken"}, 1,
                                                   {"S": 4, "B": 1, "X": 1}, rounds=2, reps=3)
    assert captures == ["small", "big", "broken", "big"] and cleared == [True]   # only the out-of-memory one again
    assert list(errors) == ["X"]                                                 # a capture error stays an error
    assert timed["B"]["median_us"] == 5.0 and timed["B"]["timed_alone"] and "timed_alone" not in timed["S"]
