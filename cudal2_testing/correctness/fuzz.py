"""Seeded random API cases for scripts/fuzz_api.py: generation (pure), realisation as tensors, one-case checking.

Case i of seed s depends on (s, i) only, so any failure reruns alone with `--seed s --only i`.
"""
from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import torch
import torch.nn.functional as F

from .inputs import generator
from .reference import (DTYPES, baseline_impl, error_stats, max_abs_bound, reference, strict_cublas,
                        within_tolerance)

SCHEMA = "cudal2.fuzz/1"
MAX_DIM = 20000
FLOP_CAP = 5e8          # 2*M*N*K of an ordinary case
BIG_FLOP_CAP = 2e11     # ... of a "big" case
BIG_FRACTION = 0.02
OPERAND_MODES = ("contiguous", "padded", "offset", "transposed")
OUT_MODES = ("none", "contiguous", "padded")


@dataclass(frozen=True)
class FuzzCase:
    """One API call: out = a @ b (nn, cudal2_ops.matmul) or F.linear(a, b, bias) (nt, cudal2_ops.linear)."""

    index: int
    tensor_seed: int
    m: int              # rows of the flattened A (batch * rows per batch)
    n: int
    k: int
    batch: int          # 1: A is 2-D; else A is [batch, m // batch, K]
    layout: str
    dtype: str
    bias: bool
    a_mode: str         # one of OPERAND_MODES
    b_mode: str
    out_mode: str       # one of OUT_MODES (nn only: matmul's out=)
    pad: int            # extra leading-dimension elements of "padded" operands
    offset: int         # element offset of "offset" operands (breaks 16-byte alignment when odd)

    def flops(self) -> float:
        return 2.0 * self.m * self.n * self.k

    def to_dict(self) -> dict:
        return asdict(self)


def _log_uniform(rng: random.Random, hi: int) -> int:
    return max(1, min(hi, int(round(math.exp(rng.uniform(0.0, math.log(hi)))))))


def make_case(seed: int, index: int, flop_cap: float = FLOP_CAP, big_flop_cap: float = BIG_FLOP_CAP) -> FuzzCase:
    """Case `index` of the run seeded `seed`: log-uniform M, N, K in [1, 20000], halved until under the cap."""
    rng = random.Random(f"cudal2-fuzz:{seed}:{index}")
    dims = [_log_uniform(rng, MAX_DIM) for _ in range(3)]
    cap = big_flop_cap if rng.random() < BIG_FRACTION else flop_cap
    while 2.0 * dims[0] * dims[1] * dims[2] > cap:
        i = dims.index(max(dims))
        dims[i] = max(1, dims[i] // 2)
    m, n, k = dims
    layout = rng.choice(("nn", "nt"))
    batch = rng.choice((1, 1, 1, 2, 3))
    if m < batch:
        batch = 1
    m -= m % batch
    return FuzzCase(index=index, tensor_seed=rng.getrandbits(62), m=m, n=n, k=k, batch=batch, layout=layout,
                    dtype=rng.choice(tuple(DTYPES)), bias=layout == "nt" and rng.random() < 0.5,
                    a_mode=rng.choice(OPERAND_MODES), b_mode=rng.choice(OPERAND_MODES),
                    out_mode=rng.choice(OUT_MODES) if layout == "nn" else "none",
                    pad=rng.randint(1, 64), offset=rng.randint(1, 7))


def make_cases(seed: int, count: int, **caps: float) -> list[FuzzCase]:
    """Cases 0 .. count-1 of the run seeded `seed`."""
    return [make_case(seed, i, **caps) for i in range(count)]


def operand(rows: int, cols: int, mode: str, case: FuzzCase, dtype: torch.dtype, g: torch.Generator,
            device: torch.device | str, fill: bool = True) -> torch.Tensor:
    """A [rows, cols] tensor laid out as `mode` says, randn-filled (or left empty when fill is False)."""
    def make(*shape: int) -> torch.Tensor:
        if fill:
            return torch.randn(shape, generator=g, device=device, dtype=torch.float32).to(dtype)
        return torch.empty(shape, device=device, dtype=dtype)

    if mode == "contiguous":
        return make(rows, cols)
    if mode == "padded":
        return make(rows, cols + case.pad)[:, :cols]
    if mode == "offset":
        return make(rows * cols + case.offset)[case.offset:].view(rows, cols)
    if mode == "transposed":
        return make(cols, rows).t()
    raise ValueError(f"unknown operand mode {mode!r}")


def case_tensors(case: FuzzCase, device: torch.device | str):
    """(a, b, bias, out) of a case; a is 3-D when case.batch > 1, out is None unless matmul gets out=."""
    dtype = DTYPES[case.dtype]
    g = generator(case.tensor_seed, device)
    a = operand(case.m, case.k, case.a_mode, case, dtype, g, device)
    if case.batch > 1:
        a = a.unflatten(0, (case.batch, case.m // case.batch))
    b_rows, b_cols = (case.k, case.n) if case.layout == "nn" else (case.n, case.k)
    b = operand(b_rows, b_cols, case.b_mode, case, dtype, g, device)
    bias = torch.randn(case.n, generator=g, device=device, dtype=torch.float32).to(dtype) if case.bias else None
    out = None
    if case.out_mode != "none":
        out = operand(case.m, case.n, case.out_mode, case, dtype, g, device, fill=False).fill_(float("nan"))
        if case.batch > 1:
            out = out.unflatten(0, (case.batch, case.m // case.batch))
    return a, b, bias, out


def fp32_api() -> tuple[Callable, Callable]:
    """(matmul, linear) computed in fp32 (no TF32) and rounded once to the input dtype: the most accurate result a
    half-precision GEMM can give, so it must pass every case (the fuzzer's self-check)."""
    def matmul(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor | None = None) -> torch.Tensor:
        with strict_cublas():
            result = (a.float() @ b.float()).to(a.dtype)
        return result if out is None else out.copy_(result)

    def linear(x: torch.Tensor, w: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
        with strict_cublas():
            return F.linear(x.float(), w.float(), None if bias is None else bias.float()).to(x.dtype)

    return matmul, linear


def call_api(case: FuzzCase, a, b, bias, out, matmul: Callable, linear: Callable) -> torch.Tensor:
    """The API call a case stands for."""
    if case.layout == "nn":
        return matmul(a, b, out=out) if out is not None else matmul(a, b)
    return linear(a, b, bias)


def reference_and_baseline(case: FuzzCase, a, b, bias, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """The fp32 reference [M, N] of a case's tensors and the baseline's result on contiguous copies of them."""
    a2 = a.reshape(case.m, case.k)
    ref = reference(a2, b, case.layout, bias)
    base = baseline_impl(case.layout, device)(a2.contiguous(), b.contiguous(), bias,
                                              torch.empty((case.m, case.n), dtype=a.dtype, device=device))
    return ref, base


def check_case(case: FuzzCase, matmul: Callable, linear: Callable, device: torch.device | str) -> dict | None:
    """Runs one case; None when right, else the failure record (case, error, repro fields)."""
    a, b, bias, out = case_tensors(case, device)
    dtype = DTYPES[case.dtype]
    expected_shape = (*a.shape[:-1], case.n)
    try:
        got = call_api(case, a, b, bias, out, matmul, linear)
    except Exception as exc:  # noqa: BLE001 (an exception is a failure to report, not to propagate)
        return {**case.to_dict(), "error": f"raised {type(exc).__name__}: {exc}"}
    problems = []
    if tuple(got.shape) != expected_shape or got.dtype != dtype:
        return {**case.to_dict(), "error": f"returned {tuple(got.shape)} {got.dtype}, expected {expected_shape} "
                                           f"{dtype}"}
    if out is not None and got.data_ptr() != out.data_ptr():
        problems.append("out= given but the result is not out")
    got2 = got.reshape(case.m, case.n)
    ref, base = reference_and_baseline(case, a, b, bias, device)
    stats, base_stats = error_stats(got2, ref), error_stats(base, ref)
    ok, detail = within_tolerance(stats, base_stats, dtype)
    if not ok:
        problems.append(detail)
    if not problems:
        return None
    return {**case.to_dict(), "error": "; ".join(problems), **stats.to_dict(),
            "max_abs_bound": max_abs_bound(base_stats)}


def explain_case(case: FuzzCase, matmul: Callable, linear: Callable, device: torch.device | str) -> dict:
    """Diagnosis of one case: the path cudal2 takes (`cudal2_ops.explain`), whether the result equals bitwise the
    baseline's or torch's with its default (reduced-precision-reduction) settings, and the worst element."""
    import cudal2_ops  # noqa: PLC0415 (the package imports this module)

    a, b, bias, out = case_tensors(case, device)
    got = call_api(case, a, b, bias, out, matmul, linear).reshape(case.m, case.n)
    ref, base = reference_and_baseline(case, a, b, bias, device)
    torch_default = call_api(case, a, b, bias, None, torch.matmul, F.linear).reshape(case.m, case.n)
    worst = int((got.float() - ref).abs().argmax())
    row, col = divmod(worst, case.n)
    return {"index": case.index, "path": cudal2_ops.explain(a, b, bias, layout=case.layout),
            "equals_baseline": bool(torch.equal(got, base)),
            "equals_torch_default": bool(torch.equal(got, torch_default)),
            "worst": {"row": row, "col": col, "reference": ref[row, col].item(), "result": got[row, col].item(),
                      "baseline": base[row, col].item()}}


def run_fuzz(seed: int, cases: Sequence[FuzzCase], matmul: Callable, linear: Callable, device: torch.device | str,
             impl_name: str, environment: dict, time_limit_s: float | None = None) -> dict:
    """Checks the cases in order (stopping once `time_limit_s` has passed) and returns the results document."""
    start = time.perf_counter()
    failures = []
    done = 0
    for case in cases:
        if time_limit_s is not None and time.perf_counter() - start > time_limit_s:
            break
        failure = check_case(case, matmul, linear, device)
        done += 1
        if failure is not None:
            failure["repro"] = f"python3 scripts/fuzz_api.py --seed {seed} --only {case.index} --impl {impl_name}"
            failures.append(failure)
    return {"schema": SCHEMA, "seed": seed, "impl": impl_name, "cases": done, "cases_requested": len(cases),
            "failures": len(failures), "elapsed_s": round(time.perf_counter() - start, 3),
            "environment": environment, "failed_cases": failures}


def validate_report(doc: dict) -> None:
    """Raises ValueError unless `doc` is a well-formed SCHEMA document."""
    required = {"schema": str, "seed": int, "impl": str, "cases": int, "cases_requested": int, "failures": int,
                "elapsed_s": float,
                "environment": dict, "failed_cases": list}
    for key, kind in required.items():
        if not isinstance(doc.get(key), (int, float) if kind is float else kind):
            raise ValueError(f"fuzz report: {key!r} missing or not {kind.__name__}")
    if doc["schema"] != SCHEMA:
        raise ValueError(f"fuzz report schema {doc['schema']!r}, expected {SCHEMA!r}")
    if doc["failures"] != len(doc["failed_cases"]):
        raise ValueError("fuzz report: 'failures' disagrees with len('failed_cases')")
    for failure in doc["failed_cases"]:
        missing = {"index", "m", "n", "k", "layout", "dtype", "error", "repro"} - failure.keys()
        if missing:
            raise ValueError(f"fuzz report: a failure lacks {sorted(missing)}")
