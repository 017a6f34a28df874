"""The timing modes of docs/EVALUATION.md.

kernel: R back-to-back calls captured in a CUDA graph, the replay timed with CUDA events, median over replays,
per-call time = replay / R; the benchmarks time a problem's implementations in rotated rounds
(`kernel_mode_interleaved`) after sizing each one's R. kernel_after: the same with a non-GEMM kernel that writes the
call's input before each call, less that kernel's own time (a GEMM's place in a model, where PDL overlaps it with a
different predecessor). offline: host perf_counter around one call with a device synchronize before and after, fresh
inputs written before each call outside the timed region, implementations interleaved in shuffled order. server:
offline plus an exponential idle gap (mean 1/QPS) before each call.
"""
from __future__ import annotations

import math
import random
import statistics
import time
from typing import Callable, Hashable

import torch

from cudal2_ops import graph_timing

# A call on input set i (kernel mode rotates sets for a cold L2).
IndexedCall = Callable[[int], object]


def summarize_us(samples_us: list[float]) -> dict:
    """median / mean / std / min (microseconds) and the sample count ("samples")."""
    return {"median_us": statistics.median(samples_us), "mean_us": statistics.fmean(samples_us),
            "std_us": statistics.pstdev(samples_us), "min_us": min(samples_us), "samples": len(samples_us)}


def estimate_ms(call: IndexedCall, n_sets: int, calls: int = 3) -> float:
    """Rough per-call GPU time (ms) from CUDA events around a few already-warm calls."""
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    torch.cuda.synchronize()
    start.record()
    for i in range(calls):
        call(i % n_sets)
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / calls


def calls_per_replay(est_ms: float, target_ms: float, cap: int, n_sets: int) -> int:
    """R so that a replay lasts about `target_ms` (at least one pass over the input sets), capped."""
    r = math.ceil(target_ms / max(est_ms, 1e-4))
    return max(1, min(cap, max(r, n_sets)))


def kernel_mode(call: IndexedCall, n_sets: int, est_ms: float, *, target_ms: float = 1.0, cap: int = 256,
                cold_cap: int = 4096, min_reps: int = 5, small_reps: int = 10) -> dict:
    """Per-call GPU time from CUDA-graph replays of R back-to-back calls rotating over `n_sets` input sets."""
    limit = cold_cap if n_sets > 1 else cap
    reps_calls = calls_per_replay(est_ms, target_ms, limit, n_sets)
    reps = min_reps if est_ms * reps_calls >= 3 * target_ms else small_reps
    per_call_us, reps_calls = graph_timing.sized_replay_us(call, n_sets, reps_calls, reps, torch.cuda.Stream(),
                                                           target_ms * 1e3, limit)
    return {**summarize_us(per_call_us), "calls_per_replay": reps_calls}


def kernel_mode_interleaved(calls: dict[Hashable, IndexedCall], n_sets: int, calls_per_replay: dict[Hashable, int], *,
                            rounds: int = 3, reps: int = 5) -> tuple[dict[Hashable, dict], dict[Hashable, Exception]]:
    """Kernel mode for several implementations of one problem at once: each one's graph of its `calls_per_replay`
    calls (from its own `kernel_mode` sizing) captured, then all timed in `rounds` rotated rounds of `reps` replays
    (`graph_timing.interleaved_us`), so that they share the GPU's power state and clock drift. A graph whose capture
    ran out of memory beside the others is captured and timed again alone once they are released (`timed_alone` in
    its summary). Returns ({key: summary with `graph_mib`, the memory its capture and warm-up left reserved}, {key: the
    error of a graph that could not be captured}); `graph_mib` says which graph holds the memory (reserved, not
    allocated: what a capture allocates and frees stays in the graph's private pool, which memory_allocated omits)."""
    stream = torch.cuda.Stream()
    graphs, held, errors = _capture_all(calls, n_sets, calls_per_replay, stream)
    timed = _timed(graphs, held, rounds, reps)
    retry = [key for key, exc in errors.items() if isinstance(exc, torch.cuda.OutOfMemoryError)]
    if retry:
        graphs.clear()
        torch.cuda.empty_cache()
    for key in retry:
        alone, held, failed = _capture_all({key: calls[key]}, n_sets, calls_per_replay, stream)
        if failed:
            errors.update(failed)
        else:
            del errors[key]
        timed.update({k: {**summary, "timed_alone": True} for k, summary in _timed(alone, held, rounds, reps).items()})
        alone.clear()   # before the next one's capture
    return timed, errors


def _capture_all(calls: dict[Hashable, IndexedCall], n_sets: int, calls_per_replay: dict[Hashable, int],
                 stream: torch.cuda.Stream) -> tuple[dict, dict[Hashable, float], dict[Hashable, Exception]]:
    """({key: its captured graph}, {key: MiB its capture left reserved}, {key: its capture's error}), the graphs alive
    together."""
    graphs, held, errors = {}, {}, {}
    for key, call in calls.items():
        before = torch.cuda.memory_reserved()
        try:
            graphs[key] = graph_timing.CapturedCalls(call, n_sets, calls_per_replay[key], stream)
            held[key] = (torch.cuda.memory_reserved() - before) / 2**20
        except RuntimeError as exc:
            errors[key] = exc
    return graphs, held, errors


def _timed(graphs: dict, held: dict[Hashable, float], rounds: int, reps: int) -> dict[Hashable, dict]:
    """{key: summary with `graph_mib`} of `graphs` timed in rotated rounds."""
    samples = graph_timing.interleaved_us(graphs, rounds, reps)
    return {key: {**summarize_us(times), "calls_per_replay": graphs[key].calls, "graph_mib": round(held[key])}
            for key, times in samples.items()}


def after_kernel_mode(call: IndexedCall, produce: IndexedCall, n_sets: int, est_ms: float, *, target_ms: float = 1.0,
                      cap: int = 256, cold_cap: int = 4096, rounds: int = 3, reps: int = 5) -> dict:
    """Per-call GPU time of a call that follows a non-GEMM kernel writing its input, as a GEMM follows a norm or an
    activation in a model (with PDL on, what a kernel overlaps with its predecessor shows here, not between two GEMMs):
    CUDA-graph replays of R (produce(i), call(i)) pairs and of the R producers alone, in `rounds` alternating rounds;
    each pair replay's per-call time less the producers' median. The row keeps the producer's time (`producer_us`)."""
    limit = cold_cap if n_sets > 1 else cap

    def pair(i: int) -> None:
        produce(i)
        call(i)

    stream = torch.cuda.Stream()
    calls = calls_per_replay(est_ms, target_ms, limit, n_sets)
    pairs, calls = graph_timing.sized_replay_us(pair, n_sets, calls, reps, stream, target_ms * 1e3, limit)
    alone = graph_timing.replay_us(produce, n_sets, calls, reps, stream)
    for _ in range(rounds - 1):
        pairs += graph_timing.replay_us(pair, n_sets, calls, reps, stream)
        alone += graph_timing.replay_us(produce, n_sets, calls, reps, stream)
    producer_us = statistics.median(alone)
    return {**summarize_us([t - producer_us for t in pairs]), "producer_us": producer_us, "calls_per_replay": calls}


def host_iterations(est_ms: float, *, budget_ms: float, min_iters: int, max_iters: int,
                    overhead_ms: float = 0.05) -> int:
    """Iterations of a host-timed mode for one implementation: fill `budget_ms`, within [min_iters, max_iters]."""
    return max(min_iters, min(max_iters, int(budget_ms / (est_ms + overhead_ms))))


def host_mode(calls: dict[Hashable, Callable[[], object]], refresh: dict[Hashable, Callable[[], None]],
              iters: dict[Hashable, int], rng: random.Random, qps: float | None = None) -> dict[Hashable, dict]:
    """offline (qps None) or server timing of several implementations, interleaved in a fresh shuffled order each
    iteration; `refresh[name]()` rewrites that implementation's inputs outside the timed region. Returns
    {key: summary in microseconds}."""
    samples: dict[Hashable, list[float]] = {name: [] for name in calls}
    for it in range(max(iters.values())):
        order = [name for name in calls if iters[name] > it]
        rng.shuffle(order)
        for name in order:
            refresh[name]()
            torch.cuda.synchronize()
            if qps:
                time.sleep(rng.expovariate(qps))
            t0 = time.perf_counter()
            calls[name]()
            torch.cuda.synchronize()
            samples[name].append((time.perf_counter() - t0) * 1e6)
    return {name: summarize_us(s) for name, s in samples.items()}
