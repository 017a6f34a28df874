"""The correctness checks of docs/EVALUATION.md, one function each, over an implementation callable.

Each check has the signature `check(impl, shape, layout, dtype, ctx) -> CheckResult`; `shape` is (M, N, K).
`stream` and `graph` need a CUDA device; the others also run on CPU tensors (with a CPU impl).
"""
from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import torch

from .inputs import (GuardedTensor, exact_expected, exact_inputs, integer_inputs, integer_value_bound, random_inputs,
                     same_bits)
from .reference import Impl, baseline_impl, default_device, dtype_name, error_stats, reference, within_tolerance

# Stream check: how long the caller's stream sleeps before its inputs are written.
STREAM_SLEEP_S = 0.25
# (name, extra leading-dimension elements, element offset) of the strided-layout check.
LAYOUT_VARIANTS = (("ld+8", 8, 0), ("ld+1,offset+1", 1, 1), ("offset+3", 0, 3))


@dataclass
class CheckResult:
    """The outcome of one check on one problem."""

    check: str
    shape: tuple[int, int, int]
    layout: str
    dtype: str
    passed: bool
    detail: str

    def to_dict(self) -> dict:
        return asdict(self)


@dataclass
class CheckContext:
    """What every check needs besides the problem: bias or not, the baseline, the seeds, the device."""

    with_bias: bool = False
    baseline: Impl | None = None       # None: baseline_impl (cuBLASLt on CUDA, torch on the CPU)
    seeds: tuple[int, ...] = (0, 1, 2)
    device: torch.device = field(default_factory=default_device)
    # Inputs and their references kept for the next impl checked on the same problem (None: made afresh each time).
    # Only for impls that cannot write the caller's tensors (the search's judge, whose candidates run in another
    # process on copies); it keeps one per batch of one problem's candidates.
    memo: dict | None = None

    def baseline_for(self, layout: str) -> Impl:
        return self.baseline if self.baseline is not None else baseline_impl(layout, self.device)

    def kept(self, key: tuple, make: Callable[[], tuple]) -> tuple:
        """make(), once per key while a memo is kept."""
        if self.memo is None:
            return make()
        if key not in self.memo:
            self.memo[key] = make()
        return self.memo[key]


def _result(name: str, shape, layout: str, dtype: torch.dtype, passed: bool, detail: str) -> CheckResult:
    return CheckResult(name, tuple(shape), layout, dtype_name(dtype), bool(passed), detail)


def _poisoned_out(shape, dtype: torch.dtype, device) -> torch.Tensor:
    m, n, _ = shape
    return torch.full((m, n), float("nan"), dtype=dtype, device=device)


def _reference_and_baseline(a, b, bias, layout: str, dtype, baseline: Impl) -> tuple[torch.Tensor, torch.Tensor]:
    """(the fp32 reference, the baseline's output on contiguous copies) of one set of inputs."""
    ref = reference(a, b, layout, bias)
    m, n = ref.shape
    base_out = baseline(a.contiguous(), b.contiguous(), None if bias is None else bias.contiguous(),
                        torch.empty((m, n), dtype=dtype, device=a.device))
    return ref, base_out


def _accuracy(impl_out: torch.Tensor, a, b, bias, layout: str, dtype, baseline: Impl) -> tuple[bool, str]:
    """Both accuracy criteria for one result, the baseline run on contiguous copies of the same inputs."""
    ref, base_out = _reference_and_baseline(a, b, bias, layout, dtype, baseline)
    return within_tolerance(error_stats(impl_out, ref), error_stats(base_out, ref), dtype)


def _random_case(shape, layout: str, dtype: torch.dtype, ctx: CheckContext, seed: int) -> tuple:
    """(a, b, bias, fp32 reference, the baseline's output) of one seed's randn inputs."""
    a, b, bias = random_inputs(shape, layout, dtype, ctx.with_bias, seed, ctx.device)
    return (a, b, bias) + _reference_and_baseline(a, b, bias, layout, dtype, ctx.baseline_for(layout))


def check_random(impl: Impl, shape, layout: str, dtype: torch.dtype, ctx: CheckContext) -> CheckResult:
    """Fresh randn inputs per seed: relative and max-abs error within tolerance on every seed."""
    details = []
    for seed in ctx.seeds:
        a, b, bias, ref, base_out = ctx.kept(("random", tuple(shape), layout, dtype, ctx.with_bias, seed),
                                             lambda: _random_case(shape, layout, dtype, ctx, seed))
        out = impl(a, b, bias, _poisoned_out(shape, dtype, ctx.device))
        ok, detail = within_tolerance(error_stats(out, ref), error_stats(base_out, ref), dtype)
        if not ok:
            return _result("random", shape, layout, dtype, False, f"seed {seed}: {detail}")
        details.append(detail)
    return _result("random", shape, layout, dtype, True, f"{len(ctx.seeds)} seeds; last: {details[-1]}")


def check_exact(impl: Impl, shape, layout: str, dtype: torch.dtype, ctx: CheckContext) -> CheckResult:
    """0/1 inputs: every output equals dtype(round(exact sum)) bit for bit (fp16 accumulation fails)."""
    a, b, bias, expected = ctx.kept(("exact", tuple(shape), layout, dtype, ctx.with_bias, ctx.seeds[0]),
                                    lambda: _exact_case(exact_inputs(shape, layout, dtype, ctx.with_bias,
                                                                     ctx.seeds[0], ctx.device), layout))
    return _exact_result("exact", impl, a, b, bias, expected, shape, layout, dtype, ctx)


def check_exact_small_k(impl: Impl, shape, layout: str, dtype: torch.dtype, ctx: CheckContext) -> CheckResult:
    """Integer inputs in [1, v] whose partial sums pass 2048 at any K: every output equals dtype(round(exact sum))
    bit for bit (fp16 / bf16 accumulation fails at small K too, where the 0/1 check's sums stay below 2048)."""
    v = integer_value_bound(shape[2])
    if v is None:
        return _result("exact_small_k", shape, layout, dtype, True, f"K={shape[2]} is deep enough for the 0/1 check")
    a, b, bias, expected = ctx.kept(("exact_small_k", tuple(shape), layout, dtype, ctx.with_bias, ctx.seeds[0], v),
                                    lambda: _exact_case(integer_inputs(shape, layout, dtype, ctx.with_bias,
                                                                       ctx.seeds[0], ctx.device, v), layout))
    return _exact_result("exact_small_k", impl, a, b, bias, expected, shape, layout, dtype, ctx)


def _exact_case(inputs: tuple, layout: str) -> tuple:
    """(a, b, bias, dtype(round(exact sum))) of exact-integer operands."""
    a, b, bias = inputs
    return a, b, bias, exact_expected(a, b, layout, bias)


def _exact_result(name: str, impl: Impl, a, b, bias, expected, shape, layout: str, dtype: torch.dtype,
                  ctx: CheckContext) -> CheckResult:
    """Runs `impl` on exact-integer operands and compares every output with `expected`, dtype(round(exact sum)),
    bit for bit."""
    out = impl(a, b, bias, _poisoned_out(shape, dtype, ctx.device))
    peak = float(expected.float().max()) if expected.numel() else 0.0
    note = f"max exact sum {peak:g}" + ("" if peak > 2048 else " (<= 2048: accumulation precision not exercised)")
    if same_bits(out.reshape(expected.shape), expected):
        return _result(name, shape, layout, dtype, True, note)
    wrong = (out.reshape(expected.shape).view(torch.int16) != expected.view(torch.int16)).nonzero()
    i, j = (int(x) for x in wrong[0])
    return _result(name, shape, layout, dtype, False,
                   f"{wrong.shape[0]} of {expected.numel()} outputs differ; first [{i}, {j}]: got "
                   f"{float(out.reshape(expected.shape)[i, j])}, expected {float(expected[i, j])}; {note}")


def _guarded_operands(shape, layout, dtype, ctx: CheckContext, seed: int, ld_pad: int, offset: int):
    """GuardedTensor views of a, b, bias (filled with randn) and out (filled with NaN)."""
    a, b, bias = random_inputs(shape, layout, dtype, ctx.with_bias, seed, ctx.device)
    m, n, _ = shape
    ga = GuardedTensor(a.shape, dtype, ctx.device, ld=a.shape[1] + ld_pad, offset=offset, seed=seed + 1).fill(a)
    gb = GuardedTensor(b.shape, dtype, ctx.device, ld=b.shape[1] + ld_pad, offset=offset, seed=seed + 2).fill(b)
    gbias = (GuardedTensor(bias.shape, dtype, ctx.device, offset=offset, seed=seed + 3).fill(bias)
             if bias is not None else None)
    gout = GuardedTensor((m, n), dtype, ctx.device, ld=n + ld_pad, offset=offset, seed=seed + 4).fill(float("nan"))
    return ga, gb, gbias, gout


def _guard_damage(ga, gb, gbias, gout, gws=None) -> list[str]:
    """Descriptions of every byte written where the callee must not write."""
    damage = []
    for name, g, whole in (("a", ga, True), ("b", gb, True), ("bias", gbias, True), ("out", gout, False),
                           ("workspace", gws, False)):
        if g is not None:
            found = g.changed_anywhere() if whole else g.changed_outside()
            if found:
                damage.append(f"{name}: {found}")
    return damage


def check_guards(impl: Impl, shape, layout: str, dtype: torch.dtype, ctx: CheckContext) -> CheckResult:
    """out poisoned with NaN, all operands (and the workspace) fenced by 64 KiB guards: no NaN left, guards intact."""
    ga, gb, gbias, gout = _guarded_operands(shape, layout, dtype, ctx, ctx.seeds[0], 0, 0)
    bias_view = gbias.view if gbias is not None else None
    gws = None
    workspace_bytes: Callable | None = getattr(impl, "workspace_bytes", None)
    if workspace_bytes is not None:
        gws = GuardedTensor((workspace_bytes(ga.view, gb.view, bias_view, gout.view),), torch.uint8, ctx.device,
                            seed=ctx.seeds[0] + 5)
        gws.fill(gws.view.clone())
        out = impl(ga.view, gb.view, bias_view, gout.view, workspace=gws.view)
    else:
        out = impl(ga.view, gb.view, bias_view, gout.view)
    problems = _guard_damage(ga, gb, gbias, gout, gws)
    nan_rows = torch.isnan(out.reshape(shape[0], shape[1])).any(dim=1).nonzero().flatten()
    if nan_rows.numel():
        problems.append(f"NaN left in {nan_rows.numel()} of {shape[0]} rows (first row {int(nan_rows[0])}, "
                        f"last row {int(nan_rows[-1])})")
    detail = "; ".join(problems) if problems else "no NaN left, guards intact" + (", workspace fenced" if gws else "")
    return _result("guards", shape, layout, dtype, not problems, detail)


def check_layouts(impl: Impl, shape, layout: str, dtype: torch.dtype, ctx: CheckContext) -> CheckResult:
    """Padded leading dimensions and element offsets that break 16-byte alignment: still right, guards intact."""
    for name, ld_pad, offset in LAYOUT_VARIANTS:
        ga, gb, gbias, gout = _guarded_operands(shape, layout, dtype, ctx, ctx.seeds[0], ld_pad, offset)
        bias_view = gbias.view if gbias is not None else None
        out = impl(ga.view, gb.view, bias_view, gout.view)
        ok, detail = _accuracy(out, ga.view, gb.view, bias_view, layout, dtype, ctx.baseline_for(layout))
        damage = _guard_damage(ga, gb, gbias, gout)
        if not ok or damage:
            return _result("layouts", shape, layout, dtype, False, f"{name}: " + "; ".join([detail] + damage))
    return _result("layouts", shape, layout, dtype, True, ", ".join(v[0] for v in LAYOUT_VARIANTS) + " right")


def check_determinism(impl: Impl, shape, layout: str, dtype: torch.dtype, ctx: CheckContext) -> CheckResult:
    """The same inputs twice give bitwise identical outputs."""
    a, b, bias = random_inputs(shape, layout, dtype, ctx.with_bias, ctx.seeds[0], ctx.device)
    first = impl(a, b, bias, _poisoned_out(shape, dtype, ctx.device)).clone()
    second = impl(a, b, bias, _poisoned_out(shape, dtype, ctx.device))
    if same_bits(first, second):
        return _result("determinism", shape, layout, dtype, True, "two runs bitwise identical")
    differ = int((first.view(torch.int16) != second.view(torch.int16)).sum())
    return _result("determinism", shape, layout, dtype, False, f"{differ} outputs differ between two runs")


@functools.cache
def _sleep_cycles(device_index: int, seconds: float) -> int:
    """The torch.cuda._sleep argument that spins about `seconds` on this device (measured)."""
    probe = 2_000_000
    with torch.cuda.device(device_index):
        for _ in range(2):  # the first round pays for module loading
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            torch.cuda._sleep(probe)
            end.record()
            end.synchronize()
        return int(probe * seconds * 1000.0 / max(start.elapsed_time(end), 1e-3))


def check_stream(impl: Impl, shape, layout: str, dtype: torch.dtype, ctx: CheckContext) -> CheckResult:
    """On the caller's (non-default) stream behind a long sleep: sees the inputs written there, never syncs the host."""
    new = random_inputs(shape, layout, dtype, ctx.with_bias, ctx.seeds[0], ctx.device)
    a, b, bias = (t.clone() if t is not None else None
                  for t in random_inputs(shape, layout, dtype, ctx.with_bias, ctx.seeds[0] + 1000, ctx.device))
    out = _poisoned_out(shape, dtype, ctx.device)
    impl(a, b, bias, out)  # warm-up: lazy initialisation and autotuning happen outside the measured call
    torch.cuda.synchronize(ctx.device)
    cycles = _sleep_cycles(ctx.device.index or torch.cuda.current_device(), STREAM_SLEEP_S)
    stream = torch.cuda.Stream(ctx.device)
    with torch.cuda.stream(stream):
        torch.cuda._sleep(cycles)
        for dst, src in zip((a, b, bias), new):
            if dst is not None:
                dst.copy_(src)
        out.fill_(float("nan"))
        t0 = time.perf_counter()
        result = impl(a, b, bias, out)
        returned_s = time.perf_counter() - t0
        busy_on_return = not stream.query()
    torch.cuda.synchronize(ctx.device)
    problems = []
    if not busy_on_return:
        problems.append(f"the caller's stream was idle when the call returned after {returned_s * 1e3:.0f} ms "
                        f"(the stream slept {STREAM_SLEEP_S * 1e3:.0f} ms): the call synchronised the host")
    ok, detail = _accuracy(result, *new[:2], new[2], layout, dtype, ctx.baseline_for(layout))
    if not ok:
        problems.append(f"result does not match the inputs written on the caller's stream ({detail}): "
                        f"the work ran on another stream")
    return _result("stream", shape, layout, dtype, not problems,
                   "; ".join(problems) or f"returned in {returned_s * 1e3:.1f} ms, stream-ordered")


def check_graph(impl: Impl, shape, layout: str, dtype: torch.dtype, ctx: CheckContext) -> CheckResult:
    """Captured in a CUDA graph, inputs changed in place, replayed: matches the reference of the new inputs."""
    static = [t.clone() if t is not None else None
              for t in random_inputs(shape, layout, dtype, ctx.with_bias, ctx.seeds[0] + 2000, ctx.device)]
    a, b, bias = static
    out = _poisoned_out(shape, dtype, ctx.device)
    side = torch.cuda.Stream(ctx.device)
    side.wait_stream(torch.cuda.current_stream(ctx.device))
    with torch.cuda.stream(side):
        impl(a, b, bias, out)  # warm-up outside the capture, as torch.cuda.graphs recommends
    torch.cuda.current_stream(ctx.device).wait_stream(side)
    torch.cuda.synchronize(ctx.device)
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            result = impl(a, b, bias, out)
    except Exception as exc:  # noqa: BLE001 (whatever breaks the capture fails the check)
        return _result("graph", shape, layout, dtype, False, f"capture failed: {exc}".splitlines()[0])
    new = random_inputs(shape, layout, dtype, ctx.with_bias, ctx.seeds[0], ctx.device)
    for dst, src in zip(static, new):
        if dst is not None:
            dst.copy_(src)
    out.fill_(float("nan"))
    result.fill_(float("nan"))
    graph.replay()
    torch.cuda.synchronize(ctx.device)
    ok, detail = _accuracy(result, new[0], new[1], new[2], layout, dtype, ctx.baseline_for(layout))
    return _result("graph", shape, layout, dtype, ok, ("replay after in-place input change: " if ok else
                                                       "replay does not follow the new inputs: ") + detail)


CHECKS: dict[str, Callable[..., CheckResult]] = {
    "random": check_random, "exact": check_exact, "guards": check_guards, "layouts": check_layouts,
    "determinism": check_determinism, "stream": check_stream, "graph": check_graph, "exact_small_k": check_exact_small_k,
}
CUDA_ONLY = frozenset({"stream", "graph"})
