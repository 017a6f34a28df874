"""`run_checks`: every check of docs/EVALUATION.md over a list of shapes, and a compact text summary."""
from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Sequence

import torch

from .checks import CHECKS, CUDA_ONLY, CheckContext, CheckResult
from .reference import Impl, default_device, dtype_name


def default_checks(device: torch.device) -> tuple[str, ...]:
    """Every check that runs on `device` (stream and graph need CUDA)."""
    return tuple(name for name in CHECKS if device.type == "cuda" or name not in CUDA_ONLY)


def run_checks(impl: Impl, shapes: Iterable[tuple[int, int, int]], layout: str, dtype: torch.dtype, *,
               with_bias: bool = False, baseline: Impl | None = None, seeds: Sequence[int] = (0, 1, 2),
               checks: Sequence[str] | None = None, device: torch.device | str | None = None) -> list[CheckResult]:
    """Runs `checks` (default: all that the device supports) on each (M, N, K); an exception fails that check.

    `baseline` is the implementation whose max-abs error sets the bound (default torch.matmul / F.linear in the
    same dtype). An impl with a `workspace_bytes(a, b, bias, out)` attribute is called with `workspace=` by the
    guard check, so its workspace is fenced too.
    """
    device = torch.device(device) if device is not None else default_device()
    names = tuple(checks) if checks is not None else default_checks(device)
    unknown = [n for n in names if n not in CHECKS]
    if unknown:
        raise ValueError(f"unknown checks {unknown}; known: {list(CHECKS)}")
    if device.type != "cuda" and CUDA_ONLY.intersection(names):
        raise ValueError(f"checks {sorted(CUDA_ONLY.intersection(names))} need a CUDA device, got {device}")
    ctx = CheckContext(with_bias=with_bias, baseline=baseline, seeds=tuple(seeds), device=device)
    results = []
    for shape in shapes:
        shape = tuple(int(x) for x in shape)
        for name in names:
            try:
                results.append(CHECKS[name](impl, shape, layout, dtype, ctx))
            except Exception as exc:  # noqa: BLE001 (any failure of the impl is a failed check, reported)
                first_line = str(exc).splitlines()[0] if str(exc) else ""
                results.append(CheckResult(name, shape, layout, dtype_name(dtype), False,
                                           f"raised {type(exc).__name__}: {first_line}"))
    return results


def all_passed(results: Iterable[CheckResult]) -> bool:
    """True when every result passed (and there was at least one)."""
    results = list(results)
    return bool(results) and all(r.passed for r in results)


def summarize(results: Sequence[CheckResult], max_failures: int = 20) -> str:
    """Counts per check, then one line per failure (at most `max_failures`)."""
    passed, failed = Counter(), Counter()
    for r in results:
        (passed if r.passed else failed)[r.check] += 1
    n_fail = sum(failed.values())
    lines = [f"correctness: {len(results) - n_fail}/{len(results)} passed" + (f", {n_fail} FAILED" if n_fail else "")]
    for name in dict.fromkeys(r.check for r in results):
        lines.append(f"  {name:<12} {passed[name]:>5} passed {failed[name]:>5} failed")
    failures = [r for r in results if not r.passed]
    for r in failures[:max_failures]:
        m, n, k = r.shape
        lines.append(f"FAIL {r.check} {r.layout} {r.dtype} M={m} N={n} K={k}: {r.detail}")
    if len(failures) > max_failures:
        lines.append(f"... and {len(failures) - max_failures} more failures")
    return "\n".join(lines)
