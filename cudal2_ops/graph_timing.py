"""GPU time per call by CUDA-graph replay: the one capture-and-replay timer of the project (the tuner, and through
cudal2_testing.measure.timing the benchmarks, sweep and judge's kernel mode).

`calls` back-to-back calls are captured on a side stream (after two warm-up calls there, outside the capture), the
graph is replayed once to upload it, then `replays` replays are timed with CUDA events, queued back to back.
"""
from __future__ import annotations

from typing import Callable

import torch


def replay_us(call: Callable[[int], object], n_sets: int, calls: int, replays: int,
              stream: torch.cuda.Stream) -> list[float]:
    """Per-call microseconds of each timed replay of a graph of `calls` calls `call(i % n_sets)` (i = 0 ...)."""
    stream.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(stream):  # warm the side stream (per-stream handles and workspaces) before capture
        for i in range(2):
            call(i % n_sets)
    torch.cuda.current_stream().wait_stream(stream)
    graph = torch.cuda.CUDAGraph()
    # capture_begin/end rather than torch.cuda.graph(), which runs gc.collect() and empty_cache() on every capture
    with torch.cuda.stream(stream):
        graph.capture_begin()
        try:
            for i in range(calls):
                call(i % n_sets)
        finally:
            graph.capture_end()
    graph.replay()
    torch.cuda.synchronize()
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(replays)]
    for start, end in events:
        start.record()
        graph.replay()
        end.record()
    torch.cuda.synchronize()
    return [s.elapsed_time(e) * 1e3 / calls for s, e in events]
