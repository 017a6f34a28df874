"""The judge's timed loop: R calls on R buffer sets, every output checked after every timed replay.

A `TimingSets` region holds one shared B and R distinct pairs (A_i, D_i) (R sized from the baseline's time so that
a replay lasts about TARGET_MS, within a memory budget): call i of a replay reads A_i and writes D_i, so a launcher
that skips calls (keyed on pointers, shapes or a counter) leaves outputs unwritten, and every D_i is poisoned with
NaN before each replay and checked against its fp32 reference after it. The baseline (cuBLASLt-autotune, in the
judge's process) is timed in kernel mode over the same sets. The candidate's replays run in the runner process;
the judge times them with its own events (`bracket`): on a judge stream, a short spin, then T0 and the "go" event;
the runner's stream waits on "go", replays its graph and records "done"; the judge's stream waits on "done" and
records T1. The spin lets every step be enqueued before T0 runs (a measurement whose spin ended too early is
repeated). T1 - T0 less the same bracket around an empty replay is the candidate's time, measured where no candidate
code was ever loaded.
"""
from __future__ import annotations

import dataclasses
import math
import statistics

import torch

from cudal2_testing.correctness.checks import _sleep_cycles
from cudal2_testing.correctness.reference import REL_TOL, reference
from search.runner_client import RunnerClient, SharedRegion, aligned, problem_spec, wait_event

TARGET_MS = 2.0            # length of one timed replay (the candidate's and the baseline's)
MAX_CALLS = 256            # calls (and sets) per replay
SET_BUDGET = 4 << 30       # bytes of A_i + D_i sets, and again of fp32 references
SPIN_S = 0.003             # the judge's spin before T0: longer than enqueueing the rest takes
BRACKET_TRIES = 4


@dataclasses.dataclass
class TimingSets:
    """R (A_i, D_i) sets and one B for problem (m, n, k) in `layout` / `dtype`, in `region` (index `index`)."""

    region: SharedRegion
    index: int
    m: int
    n: int
    k: int
    layout: str
    dtype: torch.dtype
    calls: int

    @staticmethod
    def set_bytes(m: int, n: int, k: int, dtype: torch.dtype) -> tuple[int, int, int]:
        esize = torch.empty((), dtype=dtype).element_size()
        return aligned(m * k * esize), aligned(k * n * esize), aligned(m * n * esize)

    @classmethod
    def calls_for(cls, m: int, n: int, k: int, dtype: torch.dtype, est_us: float) -> int:
        """R: replays of about TARGET_MS, at least 2 calls, at most MAX_CALLS and the memory budget."""
        a, _, d = cls.set_bytes(m, n, k, dtype)
        by_memory = max(2, min(SET_BUDGET // (a + d), SET_BUDGET // (m * n * 4)))
        return max(2, min(MAX_CALLS, by_memory, math.ceil(TARGET_MS * 1e3 / max(est_us, 0.5))))

    @classmethod
    def region_bytes(cls, m: int, n: int, k: int, dtype: torch.dtype, calls: int) -> int:
        a, b, d = cls.set_bytes(m, n, k, dtype)
        return b + calls * (a + d)

    def __post_init__(self):
        a, b, d = self.set_bytes(self.m, self.n, self.k, self.dtype)
        self.offsets = {"b": 0, "a": [b + i * a for i in range(self.calls)],
                        "d": [b + self.calls * a + i * d for i in range(self.calls)]}
        self.b = self.region.view(0, (self.k, self.n) if self.layout == "nn" else (self.n, self.k), self.dtype)
        self.a = [self.region.view(o, (self.m, self.k), self.dtype) for o in self.offsets["a"]]
        self.d = [self.region.view(o, (self.m, self.n), self.dtype) for o in self.offsets["d"]]
        self.refs: list[torch.Tensor] = []

    def fill(self, seed: int, references: bool = True) -> None:
        """Random normal A_i and B from `seed` (the same seed gives the same sets), and their fp32 references."""
        g = torch.Generator(device="cuda")
        g.manual_seed(seed)
        self.b.copy_(torch.randn(self.b.shape, generator=g, device="cuda"))
        for a in self.a:
            a.copy_(torch.randn(a.shape, generator=g, device="cuda"))
        self.refs = [reference(a, self.b, self.layout) for a in self.a] if references else []

    def poison(self) -> None:
        for d in self.d:
            d.fill_(float("nan"))

    def wrong_outputs(self) -> str:
        """"" when every D_i is within tolerance of its reference, else which are not."""
        tol = REL_TOL[self.dtype]
        errors = [((d.float() - ref).norm() / ref.norm().clamp_min(1e-30)).item() for d, ref in zip(self.d, self.refs)]
        bad = [(i, e) for i, e in enumerate(errors) if not e <= tol]
        if not bad:
            return ""
        return (f"{len(bad)} of {self.calls} outputs wrong (first: call {bad[0][0]}, relative error {bad[0][1]:.3g} "
                f"> {tol:g})")

    def max_error(self) -> float:
        return max(((d.float() - ref).norm() / ref.norm().clamp_min(1e-30)).item() for d, ref in zip(self.d, self.refs))

    def specs(self, knobs, workspace: list | None, workspace_bytes: int) -> list[dict]:
        """The runner's problem for each call i (set i; the shared workspace)."""
        lds = {"a": self.k, "b": self.n if self.layout == "nn" else self.k, "d": self.n}
        return [problem_spec(self.m, self.n, self.k, self.dtype, self.layout,
                             {"a": [self.index, self.offsets["a"][i]], "b": [self.index, 0],
                              "d": [self.index, self.offsets["d"][i]], "workspace": workspace}, lds, knobs,
                             workspace_bytes) for i in range(self.calls)]


class Bracket:
    """The judge's events around one piece of the runner's work (see the module docstring)."""

    def __init__(self, runner: RunnerClient):
        self.runner = runner
        self.stream = torch.cuda.Stream()
        self.cycles = _sleep_cycles(torch.cuda.current_device(), SPIN_S)

    def measure(self, op: str, **fields) -> tuple[float, dict]:
        """(judge-measured microseconds, the runner's answer) of one request whose work waits on "go" and
        records "done"."""
        spin = self.cycles
        for _ in range(BRACKET_TRIES):
            spun, t0, t1 = (torch.cuda.Event(), torch.cuda.Event(enable_timing=True),
                            torch.cuda.Event(enable_timing=True))
            with torch.cuda.stream(self.stream):
                torch.cuda._sleep(spin)
                spun.record()
                t0.record()
                self.runner.go.record()
            answer = self.runner.request(op, **fields)
            self.stream.wait_event(self.runner.done)
            t1.record(self.stream)
            late = spun.query()   # the spin ended before T1 was enqueued: T0 may hold host time
            wait_event(t1, self.runner)
            if not late:
                return t0.elapsed_time(t1) * 1e3, answer
            spin *= 4
        raise RuntimeError(f"the judge could not enqueue a bracket within a {spin // 4} cycle spin "
                           f"({BRACKET_TRIES} tries)")

    def overhead_us(self, reps: int = 7) -> float:
        """Median bracket around an empty replay: the cost of going to the runner's context and back."""
        return statistics.median(self.measure("replay", empty=True)[0] for _ in range(reps))
