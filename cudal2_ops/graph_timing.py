"""GPU time per call by CUDA-graph replay: the one capture-and-replay timer of the project (the tuner, and through
cudal2_testing.measure.timing the benchmarks, sweep and judge's kernel mode).

`calls` back-to-back calls are captured on a side stream (after two warm-up calls there, outside the capture), the
graph is replayed once to upload it, then `replays` replays are timed with CUDA events, queued back to back.
`sized_replay_us` re-sizes the call count from the graph's own per-call time when an eager estimate made it too small;
`interleaved_us` times several captured graphs in rotated rounds, so that they share the GPU's state.
"""
from __future__ import annotations

import math
import statistics
from typing import Callable

import torch


class CapturedCalls:
    """A graph of `calls` calls `call(i % n_sets)` (i = 0 ...) captured once on `stream`, after two warm-up calls
    there, and uploaded by one replay; `time` replays it."""

    def __init__(self, call: Callable[[int], object], n_sets: int, calls: int, stream: torch.cuda.Stream):
        self.calls = calls
        stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(stream):  # warm the side stream (per-stream handles and workspaces) before capture
            for i in range(2):
                call(i % n_sets)
        torch.cuda.current_stream().wait_stream(stream)
        self.graph = torch.cuda.CUDAGraph()
        # capture_begin/end rather than torch.cuda.graph(), which runs gc.collect() and empty_cache() on every capture
        with torch.cuda.stream(stream):
            self.graph.capture_begin()
            try:
                for i in range(calls):
                    call(i % n_sets)
            finally:
                self.graph.capture_end()
        self.graph.replay()
        torch.cuda.synchronize()

    def time(self, replays: int) -> list[float]:
        """Per-call microseconds of each of `replays` replays, queued back to back and timed with CUDA events."""
        events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(replays)]
        for start, end in events:
            start.record()
            self.graph.replay()
            end.record()
        torch.cuda.synchronize()
        return [s.elapsed_time(e) * 1e3 / self.calls for s, e in events]


def replay_us(call: Callable[[int], object], n_sets: int, calls: int, replays: int,
              stream: torch.cuda.Stream) -> list[float]:
    """Per-call microseconds of each timed replay of a graph of `calls` calls `call(i % n_sets)` (i = 0 ...)."""
    return CapturedCalls(call, n_sets, calls, stream).time(replays)


def interleaved_us(graphs: dict, rounds: int, replays: int) -> dict:
    """{key: per-call microseconds} of several captured graphs (`CapturedCalls` or anything with `time(replays)`)
    timed in `rounds` rounds of `replays` replays each, every graph once per round, the order rotated by one place
    each round: no graph is always the first timed after a pause or always follows the same one. A power-limited GPU
    runs the first burst after a pause faster than it sustains (an H200, 2-18% on problems above 2^40), and its clock
    drifts over seconds, so graphs timed one after the other compare their moments as much as their kernels."""
    keys = list(graphs)
    samples: dict = {key: [] for key in keys}
    for r in range(rounds if keys else 0):
        for key in keys[r % len(keys):] + keys[:r % len(keys)]:
            samples[key] += graphs[key].time(replays)
    return samples


def sized_replay_us(call: Callable[[int], object], n_sets: int, calls: int, replays: int, stream: torch.cuda.Stream,
                    target_us: float, cap: int) -> tuple[list[float], int]:
    """`replay_us` with `calls` corrected upwards: returns the per-call times and the call count used.

    `calls` comes from an eager estimate, which the host's launch overhead or a first call's one-time work (lazy
    module loading, a first-use check) can inflate many times over; a replay far shorter than `target_us` then pays
    the graph launch's own latency over a few calls and overstates the per-call time (seen on an H100: 4-5 us GEMMs
    timed at 20-30 us with 3 calls per replay). So while the median replay lasts under a quarter of the target and
    `cap` allows more calls, the count is re-sized from the graph's per-call time and the replays repeated (twice at
    most; the count only grows, so it stays at least `n_sets`)."""
    for _ in range(2):
        per_call = replay_us(call, n_sets, calls, replays, stream)
        median = statistics.median(per_call)
        if calls >= cap or median * calls >= target_us / 4:
            return per_call, calls
        calls = min(cap, max(calls + 1, math.ceil(target_us / max(median, 1e-3))))
    return replay_us(call, n_sets, calls, replays, stream), calls
