"""How long the kernel-library build will take, so that it can say so from its first line and stay right throughout.

Each kernel counts its family's measured compile time for each target it is built for (a cached object counts
nothing); a build with J jobs takes about the sum over J, and never less than its longest kernel. While the build
runs, the figures are scaled by how fast this machine compiled the kernels finished so far.
"""
from __future__ import annotations

import threading

# Seconds of one nvcc compile of one kernel for one target, measured one kernel at a time with one job
# (`python -m build_tools.kernel_lib --names NAME --archs ARCH --jobs 1` into an empty cache, and
# `kernel_lib.compile_object` alone) on the project's 2-core CPU machine, nvcc 13.0, CUTLASS 4.2.0.0, 2026-11-25:
#   decode       decode_fp16_nt_8x128x128_s4_w8 2.3 s (8.0, compile alone), 2.7-2.8 s with start and link (8.0, 9.0a);
#                decode_bf16_nt_64x256x64_s4_w8 2.9 s (9.0a, alone), 4.3 s with start and link (8.0)
#   tiny         tiny_fp16_nt_32x64x64_s4_w8, tiny_bf16_nn_64x128x64_s3_w16 1.5-1.6 s (8.0, 9.0, compile alone),
#                2.5 s with start and link (tiny_fp16_nt_64x64x64_s3_w4 8.0 and 9.0a, 2026-11-26)
#   sm80_cute    sm80_cute_fp16_nt_64x64x64_s3_w4 29.3 s (8.0), 23.6 s (9.0a)
#   sm90_tma_ws  ..._fp16_nt_64x16x128_s0_c1x1_pingpong_persistent_swap 47.9 s, ..._fp16_nt_128x256x64_s0_c2x1_coop_
#                persistent 52.3 s, ..._fp16_nt_128x128x64_s0_c1x1_coop_streamk 51.3 s (9.0a)
# Check against a whole build: 16 decode, 17 sm80_cute and 28 sm90_tma_ws kernels for 8.0;9.0a (the sm80 folder's
# kernels twice) with 2 jobs: (32 * 3 + 34 * 26 + 28 * 50) / 2 = 1190 s predicted; the first scripts/main.sh on a clean
# clone at 25406cc (2 cores, no GPU) took 19 min 32 s (1172 s) for that build (issue 24). On an H100 host (16 cores,
# 16 jobs) the 61 kernels for 9.0a took 2 min 57 s against 1 min 58 s predicted (16 compiles at once run slower each);
# the running correction said 1 min 26 s left at the first finished kernel, when 1 min 54 s were.
FAMILY_SECONDS = {"tiny": 2.0, "decode": 3.0, "sm80_cute": 26.0, "sm90_tma_ws": 50.0}
# A kernel of no family above (e.g. one the search wrote): counted as the slowest family.
UNKNOWN_FAMILY_SECONDS = max(FAMILY_SECONDS.values())

# The binding (cudal2_ops._C: every csrc/*.cpp with torch's headers, then the link) from scratch, 11 sources at
# 25406cc, on an H100 host (torch 2.11, g++ 13): 1 min 22 s with MAX_JOBS=2 on 2 cores (taskset), 57 s with 16 jobs
# on 16 cores, so about 164 s of compile work in all, and never less than its longest source (about 57 s).
MEASURED_BINDING_SOURCES = 11
MEASURED_BINDING_WORK_SECONDS = 164.0
MEASURED_BINDING_LONGEST_SECONDS = 57.0


def family_seconds(kernel_name: str) -> float:
    """Measured seconds of one compile of `kernel_name` for one target, by the family its name starts with."""
    for family, seconds in FAMILY_SECONDS.items():
        if kernel_name.startswith(family + "_"):
            return seconds
    return UNKNOWN_FAMILY_SECONDS


def kernel_seconds(kernel_name: str, targets: int, cached: bool) -> float:
    """Expected compile seconds of one kernel built for `targets` targets (0 when its object is cached)."""
    return 0.0 if cached else family_seconds(kernel_name) * targets


def parallel_seconds(seconds: list[float], jobs: int) -> float:
    """Wall time of independent compiles of these durations on `jobs` jobs: the work spread evenly, but never less
    than the longest compile."""
    if not seconds:
        return 0.0
    return max(sum(seconds) / max(1, jobs), max(seconds))


def binding_seconds(sources: int, jobs: int) -> float:
    """Expected wall seconds of compiling `sources` binding sources from scratch on `jobs` jobs (the measured work
    scaled by the number of sources, spread over the jobs, never below the longest source)."""
    work = MEASURED_BINDING_WORK_SECONDS * sources / MEASURED_BINDING_SOURCES
    return max(work / max(1, jobs), MEASURED_BINDING_LONGEST_SECONDS)


class BuildClock:
    """The time left of a parallel build of named items with expected durations (seconds), corrected as items
    finish by the ratio of measured to expected time so far. `started` may be called from worker threads."""

    def __init__(self, expected: dict[str, float], jobs: int) -> None:
        self.expected = dict(expected)
        self.jobs = max(1, jobs)
        self._started: dict[str, float] = {}
        self._finished: set[str] = set()
        self._measured_total = 0.0
        self._expected_total = 0.0
        self._lock = threading.Lock()

    def started(self, name: str, now: float) -> None:
        """Records that the compile of `name` began at `now` (time.monotonic())."""
        with self._lock:
            self._started[name] = now

    def finished(self, name: str, now: float) -> None:
        """Records that `name` finished at `now`; an item with an expected time updates the speed estimate."""
        with self._lock:
            began = self._started.pop(name, now)
            self._finished.add(name)
            if self.expected[name] > 0:
                self._measured_total += now - began
                self._expected_total += self.expected[name]

    def speed(self) -> float:
        """Measured over expected seconds of the items finished so far (1.0 before any finished)."""
        with self._lock:
            return self._measured_total / self._expected_total if self._expected_total > 0 else 1.0

    def seconds_left(self, now: float) -> float:
        """Expected wall seconds until every item has finished: each unfinished item's scaled expected time less
        what it has already run, spread over the jobs."""
        speed = self.speed()
        with self._lock:
            left = [max(0.0, seconds * speed - (now - self._started[name] if name in self._started else 0.0))
                    for name, seconds in self.expected.items() if name not in self._finished]
        return parallel_seconds(left, self.jobs)
