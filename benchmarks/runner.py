"""Measures one (shape, dtype) for every implementation: same inputs for all, correctness gate against the fp32
reference, then each requested timing mode. Produces result rows (one per implementation, layout and mode)."""
from __future__ import annotations

import math
import random
from dataclasses import dataclass

import torch

from benchmarks import check
from benchmarks.impls import Impl
from cudal2_testing.measure import timing
from cudal2_testing.measure.shapes import Shape

DTYPES = check.DTYPES
MODES = ("kernel", "kernel_after", "offline", "server")
GRAPH_MODES = ("kernel", "kernel_after")  # timed by CUDA-graph replay
INTERLEAVED_ROUNDS = 3   # kernel mode: a problem's implementations timed in this many rotated rounds, after sizing
SIZING_REPS = 2          # replays that size an implementation's calls per replay (its times come from the rounds)


@dataclass(frozen=True)
class Settings:
    """Knobs of one run (defaults keep a full G1000 kernel-mode run within minutes)."""

    modes: tuple[str, ...] = ("kernel", "offline")
    l2: str = "warm"
    seed: int = 0
    target_ms: float = 1.0          # kernel mode: a replay lasts about this long
    offline_budget_ms: float = 30.0  # offline: host time per implementation and shape
    offline_iters: tuple[int, int] = (5, 30)
    server_iters: int = 20
    qps: float = 100.0


@dataclass
class Inputs:
    """One input set: A [M,K], B as [K,N] and [N,K], an output buffer [M,N]."""

    a: torch.Tensor
    b_kn: torch.Tensor
    b_nk: torch.Tensor
    out: torch.Tensor
    a_source: torch.Tensor | None = None  # what `produce` writes A from (kernel_after mode)

    def b(self, layout: str) -> torch.Tensor:
        return self.b_kn if layout == "nn" else self.b_nk

    def prepare_producer(self) -> None:
        """Allocates A's source for `produce` (before any capture: an allocation there would be captured too)."""
        if self.a_source is None:
            self.a_source = self.a.clone()

    def produce(self) -> None:
        """The non-GEMM kernel kernel_after mode puts before each call: an elementwise kernel that writes A (the same
        values) from its source, as a norm or an activation writes a GEMM's input in a model."""
        torch.mul(self.a_source, 1.0, out=self.a)

    def call(self, impl: Impl) -> object:
        return impl.call(self.a, self.b(impl.layout), self.out)


def make_inputs(shape: Shape, dtype: torch.dtype, gen: torch.Generator) -> Inputs:
    """randn inputs for one shape (both B layouts hold the same matrix)."""
    m, n, k = shape
    a = torch.randn(m, k, device="cuda", dtype=dtype, generator=gen)
    b_kn = torch.randn(k, n, device="cuda", dtype=dtype, generator=gen)
    return Inputs(a, b_kn, b_kn.t().contiguous(), torch.empty(m, n, device="cuda", dtype=dtype))


def touched_bytes(shape: Shape, elem: int = 2) -> int:
    """Bytes one GEMM call reads and writes at least: A, B and D once."""
    m, n, k = shape
    return elem * (m * k + k * n + m * n)


def cold_set_count(shape: Shape, l2_bytes: int, cap: int = 4096) -> int:
    """Input sets to rotate so that their total exceeds twice the L2 (at least 2)."""
    return max(2, min(cap, math.ceil(2 * l2_bytes / touched_bytes(shape)) + 1))


def _row(shape: Shape, dtype: str, impl: Impl, mode: str, **fields) -> dict:
    """One result row; a non-finite relative error is stored as null (strict JSON)."""
    m, n, k = shape
    if not math.isfinite(fields.get("rel_err", 0.0)):
        fields["rel_err"] = None
    return {"m": m, "n": n, "k": k, "dtype": dtype, "impl": impl.name, "layout": impl.layout, "mode": mode, **fields}


def _failure(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {str(exc).splitlines()[0] if str(exc) else ''}"[:300]


def check_all(impls: list[Impl], inp: Inputs, dtype: str) -> dict[Impl, tuple[bool, float, str | None]]:
    """Runs each implementation once on set `inp` (output poisoned with NaN first; this also warms up, e.g. the
    autotune of a new shape) and compares with the fp32 reference."""
    ref = check.fp32_reference(inp.a, inp.b_kn)
    verdicts = {}
    for impl in impls:
        try:
            inp.out.fill_(float("nan"))
            result = inp.call(impl)
            torch.cuda.synchronize()
            verdicts[impl] = check.verdict(result, ref, dtype)
        except RuntimeError as exc:  # includes torch.cuda.OutOfMemoryError
            verdicts[impl] = (False, float("nan"), _failure(exc))
    del ref
    return verdicts


def measure(shape: Shape, dtype: str, impls: list[Impl], todo: set[tuple[str, str, str]], settings: Settings,
            l2_bytes: int) -> list[dict]:
    """Rows for the (impl, layout, mode) triples in `todo` of one shape and dtype: failure rows (no time) for
    implementations that fail the correctness gate, timed rows for the others."""
    rng = random.Random(f"{settings.seed}/{shape}/{dtype}")
    gen = torch.Generator(device="cuda").manual_seed(rng.getrandbits(62))
    wanted = [i for i in impls if any((i.name, i.layout, mode) in todo for mode in settings.modes)]
    rng.shuffle(wanted)
    sets = [make_inputs(shape, DTYPES[dtype], gen)]
    rows: list[dict] = []
    passing: dict[Impl, float] = {}
    for impl, (ok, err, msg) in check_all(wanted, sets[0], dtype).items():
        if ok:
            passing[impl] = err
            continue
        rows += [_row(shape, dtype, impl, mode, ok=False, rel_err=err, error=msg)
                 for mode in settings.modes if (impl.name, impl.layout, mode) in todo]
    graph_modes = [mode for mode in GRAPH_MODES if mode in settings.modes]
    if settings.l2 == "cold" and graph_modes:
        sets += [make_inputs(shape, DTYPES[dtype], gen) for _ in range(cold_set_count(shape, l2_bytes) - 1)]
    if "kernel_after" in graph_modes:
        for inp in sets:
            inp.prepare_producer()
    calls = {impl: (lambda i, impl=impl: sets[i].call(impl)) for impl in passing}   # call i on input set i
    est: dict[Impl, float] = {}
    sized: dict[Impl, int] = {}   # kernel mode: each implementation's calls per replay, before the interleaved rounds
    for impl in passing:
        for mode in graph_modes:
            if (impl.name, impl.layout, mode) not in todo:
                continue
            try:
                if impl not in est:
                    est[impl] = timing.estimate_ms(calls[impl], len(sets))
                if mode == "kernel":   # sized here (a replay of about target_ms), timed with the others below
                    sized[impl] = timing.kernel_mode(calls[impl], len(sets), est[impl], target_ms=settings.target_ms,
                                                     min_reps=SIZING_REPS, small_reps=SIZING_REPS)["calls_per_replay"]
                    continue
                res = timing.after_kernel_mode(calls[impl], lambda i: sets[i].produce(), len(sets), est[impl],
                                               target_ms=settings.target_ms)
                rows.append(timed_row(shape, dtype, impl, mode, passing[impl], settings, res))
            except RuntimeError as exc:
                rows.append(_row(shape, dtype, impl, mode, ok=False, rel_err=passing[impl], error=_failure(exc)))
    if sized:
        timed, errors = timing.kernel_mode_interleaved({impl: calls[impl] for impl in sized}, len(sets), sized,
                                                       rounds=INTERLEAVED_ROUNDS)
        rows += [timed_row(shape, dtype, impl, "kernel", passing[impl], settings, res | ran_of(impl, sets[0]))
                 for impl, res in timed.items()]
        rows += [_row(shape, dtype, impl, "kernel", ok=False, rel_err=passing[impl], error=_failure(exc))
                 for impl, exc in errors.items()]
    del sets[1:]
    for mode in ("offline", "server"):
        group = [i for i in passing if mode in settings.modes and (i.name, i.layout, mode) in todo]
        if group:
            rows += _host_rows(shape, dtype, mode, group, passing, est, sets[0], settings, rng)
    return rows


def ran_of(impl: Impl, inp: Inputs) -> dict:
    """{"ran": what `impl` ran on this problem (impls.Describe)} where it says; {} where it does not. A description
    that fails is recorded as its error, never costing the row its time."""
    try:
        ran = impl.describe(inp.a, inp.b(impl.layout), inp.out)
    except Exception as exc:  # noqa: BLE001 - the row is the measurement; what ran is a diagnostic beside it
        return {"ran": {"error": _failure(exc)}}
    return {"ran": ran} if ran else {}


def timed_row(shape: Shape, dtype: str, impl: Impl, mode: str, rel_err: float, settings: Settings, res: dict) -> dict:
    """A timed row, with the process's allocated GPU memory after the timing: a leak across shapes shows in the file
    (one run held 49.6 GiB in CUDA-graph private pools by its largest shape and failed it out of memory)."""
    return _row(shape, dtype, impl, mode, ok=True, rel_err=rel_err, l2=settings.l2,
                allocated_mib=round(torch.cuda.memory_allocated() / 2**20), **res)


def _host_rows(shape: Shape, dtype: str, mode: str, group: list[Impl], errs: dict[Impl, float],
               est: dict[Impl, float], inp: Inputs, settings: Settings, rng: random.Random) -> list[dict]:
    """offline/server rows of the implementations in `group`, timed interleaved on fresh inputs."""
    try:
        for impl in group:
            est.setdefault(impl, timing.estimate_ms(lambda i, impl=impl: inp.call(impl), 1))
        if mode == "server":
            iters = {impl: settings.server_iters for impl in group}
        else:
            lo, hi = settings.offline_iters
            iters = {impl: timing.host_iterations(est[impl], budget_ms=settings.offline_budget_ms,
                                                  min_iters=lo, max_iters=hi) for impl in group}

        def refresh(layout: str) -> None:
            inp.a.normal_()
            inp.b(layout).normal_()

        res = timing.host_mode({impl: (lambda impl=impl: inp.call(impl)) for impl in group},
                               {impl: (lambda layout=impl.layout: refresh(layout)) for impl in group},
                               iters, rng, settings.qps if mode == "server" else None)
    except RuntimeError as exc:
        return [_row(shape, dtype, impl, mode, ok=False, rel_err=errs[impl], error=_failure(exc)) for impl in group]
    extra = {"qps": settings.qps} if mode == "server" else {}
    return [_row(shape, dtype, impl, mode, ok=True, rel_err=errs[impl], **res[impl], **extra) for impl in group]
