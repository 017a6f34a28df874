"""The judge's timed loop: R calls on R buffer sets, every output checked after every timed replay.

A `TimingSets` region holds one shared B and R distinct pairs (A_i, D_i) (R sized from the baseline's time so that
a replay lasts about TARGET_MS, within a memory budget): call i of a replay reads A_i and writes D_i, so a launcher
that skips calls (keyed on pointers, shapes or a counter) leaves outputs unwritten, and every D_i is poisoned with
NaN before each replay and checked against its fp32 reference after it (all R in one pass, one host sync). A case's
inputs come from its seed alone, so its fp32 references are computed once and reused by every candidate of the
batch. The baseline (cuBLASLt-autotune, in the judge's process) is timed in kernel mode over the same sets. The
candidate's replays run in the runner process; the judge times them with its own events (`Bracket`): with the
judge's own queued work finished (a device synchronize: work of the judge still running would make the GPU switch
between the two processes inside the bracket), on a judge stream, a short spin, then T0 and the "go" event; the
runner's stream waits on "go", replays its graph and records "done"; the judge's stream waits on "done" and records
T1. The spin lets every step be enqueued before T0 runs (a measurement whose spin ended too early is repeated with a
longer spin, kept for later measurements). T1 - T0 less the least bracket around an empty replay is the
candidate's time, measured where no candidate code was ever loaded; it is never taken below the runner's own event
time around its graph (a runner can only lose by reporting more).
"""
from __future__ import annotations

import dataclasses
import functools
import math
import statistics

import torch

from cudal2_testing.correctness.checks import _sleep_cycles
from cudal2_testing.correctness.reference import REL_TOL, strict_cublas
from search.runner_client import RunnerClient, SharedRegion, aligned, problem_spec, wait_event

TARGET_MS = 2.0            # length of one timed replay (the candidate's and the baseline's)
MAX_CALLS = 256            # calls (and sets) per replay
SET_BUDGET = 4 << 30       # bytes of A_i + D_i sets, and again of fp32 references
REF_CACHE_BUDGET = 3 * SET_BUDGET   # fp32 references kept for a batch's later candidates (one entry per case)
CHUNK_BYTES = 256 << 20    # fp32 temporaries of one step of a fill, a reference or an output check
SPIN_S = 0.0005            # the judge's first spin before T0 (doubled, for good, whenever enqueueing took longer)
BRACKET_TRIES = 6
REPLAY_BUDGET_MS = 6.0     # timed replays per case: until about this much replay time, MIN_REPS to MAX_REPS
MIN_REPS = 3
MAX_REPS = 10
WALL_RATIO = 2.0           # eager wall clock above this times max(events + host allowance, baseline wall): flagged
WALL_SLACK_US = 2.0
HEAT_MIN_US = 100.0        # a problem whose call takes this long is timed in the GPU's sustained state, reached by
HEAT_MS = 200.0            # running it about this long, untimed, right before its timed replays (`heat_runs`)
SCREEN_SPEEDUP = 0.8       # on such a problem, a first case below this speedup ends the candidate's timing (`screened`)


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
        self.device = self.region.tensor.device
        self.offsets = {"b": 0, "a": [b + i * a for i in range(self.calls)],
                        "d": [b + self.calls * a + i * d for i in range(self.calls)]}
        self.b = self.region.view(0, (self.k, self.n) if self.layout == "nn" else (self.n, self.k), self.dtype)
        self.a = [self.region.view(o, (self.m, self.k), self.dtype) for o in self.offsets["a"]]
        self.d = [self.region.view(o, (self.m, self.n), self.dtype) for o in self.offsets["d"]]
        self.a_block = self._block(b, a, self.m * self.k)                   # [R, m*k]: row i is A_i
        self.d_block = self._block(b + self.calls * a, d, self.m * self.n)  # [R, m*n]: row i is D_i
        self.refs: torch.Tensor | None = None       # fp32 [R, m*n] of the current case
        self.ref_norms: torch.Tensor | None = None
        self.errors: list[float] = []               # relative error per D_i at the last check
        self._references: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}   # seed -> (refs, norms)

    def _block(self, offset: int, stride_bytes: int, elems: int) -> torch.Tensor:
        """The R equally spaced arrays of `elems` elements from byte `offset` as one [R, elems] view."""
        esize = torch.empty((), dtype=self.dtype).element_size()
        flat = self.region.tensor[offset:offset + self.calls * stride_bytes].view(self.dtype)
        return flat.view(self.calls, stride_bytes // esize)[:, :elems]

    def _row_chunks(self, row_bytes: int) -> list[slice]:
        step = max(1, CHUNK_BYTES // max(row_bytes, 1))
        return [slice(i, min(i + step, self.calls)) for i in range(0, self.calls, step)]

    def fill(self, seed: int, references: bool = True) -> None:
        """Random normal A_i and B from `seed` (the same seed gives the same sets), and their fp32 references
        (computed on the first fill with this seed, then reused while the cache budget allows)."""
        g = torch.Generator(device=self.device)
        g.manual_seed(seed)
        self.b.copy_(torch.randn(self.b.shape, generator=g, device=self.device))
        for rows in self._row_chunks(self.m * self.k * 4):
            block = self.a_block[rows]
            block.copy_(torch.randn(block.shape, generator=g, device=self.device))
        self.errors = []
        if not references:
            self.refs = self.ref_norms = None
            return
        if seed not in self._references:
            refs = self._fp32_references()
            held = sum(r.numel() * 4 for r, _ in self._references.values())
            if held + refs[0].numel() * 4 > REF_CACHE_BUDGET:
                self._references.clear()
            self._references[seed] = refs
        self.refs, self.ref_norms = self._references[seed]

    def _fp32_references(self) -> tuple[torch.Tensor, torch.Tensor]:
        """A_i @ op(B) in fp32 without TF32 (as `cudal2_testing...reference`) for every i, and their norms."""
        b = self.b.float() if self.layout == "nn" else self.b.float().t()
        refs = torch.empty((self.calls, self.m * self.n), dtype=torch.float32, device=self.device)
        with strict_cublas():
            for rows in self._row_chunks((self.m * self.k + self.m * self.n) * 4):
                a = self.a_block[rows].unflatten(1, (self.m, self.k)).float()
                refs[rows] = torch.matmul(a, b).flatten(1)
        return refs, refs.norm(dim=1)

    def poison(self) -> None:
        """Every D_i to NaN (one fill)."""
        self.d_block.fill_(float("nan"))

    def _relative_errors(self) -> list[float]:
        """||D_i - ref_i|| / ||ref_i|| for every i (NaN where D_i holds NaN), with one host sync."""
        if self.refs is None:
            raise RuntimeError("the sets were filled without references")
        norms = torch.empty(self.calls, dtype=torch.float32, device=self.device)
        for rows in self._row_chunks(self.m * self.n * 8):
            norms[rows] = (self.d_block[rows].float() - self.refs[rows]).norm(dim=1)
        return (norms / self.ref_norms.clamp_min(1e-30)).tolist()

    def wrong_outputs(self) -> str:
        """"" when every D_i is within tolerance of its reference, else which are not."""
        tol = REL_TOL[self.dtype]
        self.errors = self._relative_errors()
        bad = [(i, e) for i, e in enumerate(self.errors) if not e <= tol]
        if not bad:
            return ""
        return (f"{len(bad)} of {self.calls} outputs wrong (first: call {bad[0][0]}, relative error {bad[0][1]:.3g} "
                f"> {tol:g})")

    def max_error(self) -> float:
        """The largest relative error of the last check (checked now if none was since the last fill)."""
        return max(self.errors or self._relative_errors())

    def specs(self, knobs, workspace: list | None, workspace_bytes: int) -> list[dict]:
        """The runner's problem for each call i (set i; the shared workspace)."""
        lds = {"a": self.k, "b": self.n if self.layout == "nn" else self.k, "d": self.n}
        return [problem_spec(self.m, self.n, self.k, self.dtype, self.layout,
                             {"a": [self.index, self.offsets["a"][i]], "b": [self.index, 0],
                              "d": [self.index, self.offsets["d"][i]], "workspace": workspace}, lds, knobs,
                             workspace_bytes) for i in range(self.calls)]


@functools.cache
def spin_cycles(device: int) -> int:
    """The torch.cuda._sleep argument of a SPIN_S spin on `device`, calibrated once per process."""
    return max(1000, _sleep_cycles(device, SPIN_S))


SPIN_DECAY = 15 / 16       # the spin after a bracket that needed no more (doubled after one that did)


class Bracket:
    """The judge's events around one piece of the runner's work (see the module docstring). `cycles` is the spin:
    doubled whenever it proved too short (the bracket is then measured again), and shrunk by SPIN_DECAY, down to the
    first SPIN_S, after each one it covered, so that one slow round trip (host jitter) does not lengthen every later
    bracket of the judge's life; pass it on to the next candidate's bracket. Its length never enters a measurement:
    a bracket counts only when the spin outlasted the enqueueing."""

    def __init__(self, runner: RunnerClient, cycles: int | None = None):
        self.runner = runner
        self.stream = torch.cuda.Stream()
        self.base = spin_cycles(torch.cuda.current_device())
        self.cycles = max(self.base, cycles or self.base)

    def measure(self, op: str, **fields) -> tuple[float, dict]:
        """(judge-measured microseconds, the runner's answer) of one request whose work waits on "go" and
        records "done"."""
        torch.cuda.synchronize()   # nothing of the judge's may run inside the bracket (it would share the GPU)
        for _ in range(BRACKET_TRIES):
            spun, t0, t1 = (torch.cuda.Event(), torch.cuda.Event(enable_timing=True),
                            torch.cuda.Event(enable_timing=True))
            with torch.cuda.stream(self.stream):
                torch.cuda._sleep(self.cycles)
                spun.record()
                t0.record()
                self.runner.go.record()
            answer = self.runner.request(op, **fields)
            self.stream.wait_event(self.runner.done)
            t1.record(self.stream)
            late = spun.query()   # the spin ended before T1 was enqueued: T0 may hold host time
            wait_event(t1, self.runner)
            if not late:
                self.cycles = max(self.base, int(self.cycles * SPIN_DECAY))
                return t0.elapsed_time(t1) * 1e3, answer
            self.cycles *= 2
        raise RuntimeError(f"the judge could not enqueue a bracket within a {self.cycles // 2} cycle spin "
                           f"({BRACKET_TRIES} tries)")

    def overhead_us(self, reps: int = 5) -> float:
        """The least bracket around an empty replay: the cost of going to the runner's context and back (anything
        else in a bracket only lengthens it, so the least is the cost itself)."""
        return min(self.measure("replay", empty=True)[0] for _ in range(reps))


def heat_runs(per_call_us: float, calls_per_run: int) -> int:
    """Untimed runs (of `calls_per_run` calls each) that bring the GPU to its sustained clock before a problem whose
    call takes `per_call_us` is timed; none below HEAT_MIN_US per call. A power-limited GPU runs the first burst after
    a pause faster than it sustains (an H200 on 8192x16384x8192: 2853 us after 2 s idle, 3179 us busy, for one
    kernel): the baseline, timed straight after its own estimate, and a candidate, timed after its checks and graph
    capture, must both be timed busy, or the pause is what wins (studies.judge_vs_tuner)."""
    if per_call_us < HEAT_MIN_US:
        return 0
    return math.ceil(HEAT_MS * 1e3 / (per_call_us * max(calls_per_run, 1)))


def screened(cand_us: float, base_us: float) -> bool:
    """Whether a candidate's first case settles its verdict: a case slower than its baseline (the one timed beside it
    on a problem of HEAT_MIN_US or more per call, else the cached one) by more than 1 / SCREEN_SPEEDUP. Its other
    cases would not make it a winner: on the G1000 sample (random search, 389 evaluations of such long problems,
    `budget_hardware_2026-11-26_f8944c3_partial_stores`) 262 first cases were below 0.8 and none of those evaluations
    averaged 0.97 or more over its three cases; on the searched tables' stores (`search_table_2026-11-27_2d24511_*` on
    the H200, `_ee0a6cb_*` on the H100), of the shorter problems' evaluations 10355 of 13969 (H200) and 2280 of 4092
    (H100) had a first case below 0.8, and one of those averaged 0.97 or more (0.65, 0.46, then 2.14: a glitch the
    screen drops). A clear loser's reward then rests on one case; a batch's later cases cost as much as its first."""
    return base_us < SCREEN_SPEEDUP * cand_us


def more_replays(replay_us: list[float]) -> bool:
    """Whether a case needs another timed replay: at least MIN_REPS, then until REPLAY_BUDGET_MS of replays or
    MAX_REPS."""
    if len(replay_us) < MIN_REPS:
        return True
    return len(replay_us) < MAX_REPS and sum(replay_us) < REPLAY_BUDGET_MS * 1e3


def per_call_us(judge_us: list[float], overhead_us: float, runner_us: list[float], calls: int) -> tuple[float, float]:
    """(the judge's us per call: median bracket less the empty bracket, the runner's own us per call)."""
    judged = max(statistics.median(judge_us) - overhead_us, 0.0) / calls
    return judged, statistics.median(runner_us) / calls


def wall_clock_bound_us(cand_us: float, base_us: float, base_wall_us: float) -> float:
    """The eager wall clock per call above which a candidate is flagged: WALL_RATIO x the larger of its event time
    plus the host cost of a call (the baseline's wall clock less its event time) and the baseline's wall clock, plus
    WALL_SLACK_US."""
    host_us = max(base_wall_us - base_us, 0.0)
    return WALL_RATIO * max(cand_us + host_us, base_wall_us) + WALL_SLACK_US
