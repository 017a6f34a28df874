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
