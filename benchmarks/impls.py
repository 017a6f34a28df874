"""The implementations the benchmark times: ours (the public cudal2_ops API) and every baseline of
docs/EVALUATION.md. Each is a call `(a, b, out) -> result` on row-major tensors, with b laid out as the
implementation needs ([K, N] for "nn", [N, K] for "nt")."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import torch
import torch.nn.functional as F

OURS = "cudal2"
# cudal2 with each exact table hit's cuBLASLt configuration as shipped (what cudal2 runs unless
# CUDAL2_CONFIRM_NEAR_TIES=1), beside cudal2 in one process, so a run with confirmation on tells what timing an entry's
# near-ties at the first call gains; kernel mode only (its calls look the choice up in Python), and not run unless
# named.
SHIPPED = "cudal2-shipped"
# Implementations that follow the problem layout (run once per --layouts entry).
LAYOUT_FOLLOWING = ("cudal2", "torch", SHIPPED)
# Baselines with a fixed B layout: the paper's NN ([K, N]) and TN ([N, K]) variants.
FIXED_LAYOUT = {
    "cublas-nn": "nn", "cublas-tn": "nt",
    "cublaslt-heuristic-nn": "nn", "cublaslt-heuristic-tn": "nt",
    "cublaslt-autotune-nn": "nn", "cublaslt-autotune-tn": "nt",
    # The same baseline again, selected and timed independently: the bar's own run-to-run spread (the noise floor).
    "cublaslt-autotune-nn-repeat": "nn", "cublaslt-autotune-tn-repeat": "nt",
}
ALL = LAYOUT_FOLLOWING + tuple(FIXED_LAYOUT)
DEFAULT = tuple(name for name in ALL if name != SHIPPED)

Call = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]
# What an implementation ran on a problem, after its first call: {"path", "kernel" or "cublaslt_config"} (None: not
# known). Lets a results file tell a loss between two runs of one configuration (noise) from a different choice.
Describe = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], "dict | None"]


def _unknown(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
    return None


@dataclass(frozen=True)
class Impl:
    """One timed implementation: its name, the B layout it consumes, the call and what it ran (`describe`)."""

    name: str
    layout: str
    call: Call
    describe: Describe = _unknown


def _cudal2_calls() -> dict[str, Call]:
    import cudal2_ops

    if not cudal2_ops.is_available():
        raise RuntimeError("cudal2_ops.is_available() is False")
    return {"nn": lambda a, b, out: cudal2_ops.matmul(a, b, out=out),
            "nt": lambda a, b, out: cudal2_ops.linear(a, b)}


def _cudal2_describe(layout: str) -> Describe:
    """cudal2's dispatch decision for a problem (`cudal2_ops.explain`): the table kernel or the cuBLASLt
    configuration, and where that came from."""
    import cudal2_ops

    def describe(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> dict:
        d = cudal2_ops.explain(a, b, layout=layout)
        keep = ("path", "kernel", "splits", "swizzle", "raster", "cublaslt_policy", "cublaslt_config",
                "cublaslt_near_ties", "cublaslt_near_tie_pick")
        return {key: d[key] for key in keep if key in d}
    return describe


def shipped_config(explained: dict, entries: dict, key: str) -> list[int] | None:
    """The cuBLASLt configuration fields the table ships for an exact hit that runs one (`explained`: explain's answer
    for the problem, `entries` the installed table's, `key` the problem's entry key), else None (a kernel, a rule's
    choice, a miss: cudal2 runs those the same either way)."""
    from cudal2_ops import tables

    if explained.get("path") != "cublaslt" or explained.get("cublaslt_policy") != "table" or "tuned_m" in explained:
        return None
    return tables.cublaslt_fields(entries[key])


def _shipped_impl(layout: str) -> tuple[Call, Describe]:
    """SHIPPED's call and description in `layout`: per problem (looked up once), the shipped configuration through
    the dispatcher's cuBLASLt instance, else cudal2's own call."""
    import cudal2_ops
    from cudal2_ops import _C, tables
    from cudal2_testing.correctness.reference import dtype_name, problem_shape

    ours, describe_ours = _cudal2_calls()[layout], _cudal2_describe(layout)
    chosen: dict[tuple, list[int] | None] = {}

    def config_of(a: torch.Tensor, b: torch.Tensor) -> list[int] | None:
        problem = (a.shape, b.shape, a.dtype, a.device)
        if problem not in chosen:
            explained = cudal2_ops.explain(a, b, layout=layout)
            table = tables.INSTALLED.get(a.device.index)
            key = tables.entry_key(layout, dtype_name(a.dtype), *problem_shape(a, b, layout))
            chosen[problem] = shipped_config(explained, table.entries if table else {}, key)
        return chosen[problem]

    def call(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        config = config_of(a, b)
        if config is None:
            return ours(a, b, out)
        _C.tuning.run_lt_config(a, b, None, out, layout, config)
        return out

    def describe(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> dict:
        config = config_of(a, b)
        return describe_ours(a, b, out) if config is None else {"path": "cublaslt", "cublaslt_config": config}
    return call, describe


def _torch_calls() -> dict[str, Call]:
    return {"nn": lambda a, b, out: torch.matmul(a, b, out=out),
            "nt": lambda a, b, out: F.linear(a, b)}


def _native_call(name: str, layout: str) -> Call:
    """A baseline's call: cuBLASLt on the extension's baseline instance (nothing it tunes reaches cudal2's
    dispatcher; autotune selects by CUDA-graph replay, see cudal2_testing.lt_baseline), or cublasGemmEx."""
    from cudal2_ops import _C
    from cudal2_testing import lt_baseline

    if name.startswith("cublaslt-autotune"):
        return lt_baseline.AutotunedLt(layout)   # (its `describe`: the configuration it chose)
    if name.startswith("cublaslt-heuristic"):
        return lt_baseline.heuristic(layout)
    fn = _C.testing.cublas_gemm

    def call(a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> torch.Tensor:
        fn(a, b, out, layout)
        return out
    return call


def build(names: list[str], layouts: list[str]) -> tuple[list[Impl], dict[str, str]]:
    """The runnable implementations among `names` (ours and torch once per layout in `layouts`, the fixed-layout
    baselines once each), and {name: reason} for those that cannot run here."""
    unknown = sorted(set(names) - set(ALL))
    if unknown:
        raise ValueError(f"unknown implementations {unknown}; known: {list(ALL)}")
    impls: list[Impl] = []
    unavailable: dict[str, str] = {}
    for name in names:
        try:
            if name == SHIPPED:
                impls += [Impl(name, layout, *_shipped_impl(layout)) for layout in layouts]
            elif name in LAYOUT_FOLLOWING:
                calls = _cudal2_calls() if name == OURS else _torch_calls()
                impls += [Impl(name, layout, calls[layout], _cudal2_describe(layout) if name == OURS else _unknown)
                          for layout in layouts]
            else:
                call = _native_call(name, FIXED_LAYOUT[name])
                impls.append(Impl(name, FIXED_LAYOUT[name], call, getattr(call, "describe", _unknown)))
        except Exception as exc:  # noqa: BLE001 - any failure to load an implementation makes it unavailable
            unavailable[name] = f"{type(exc).__name__}: {exc}"
    return impls, unavailable
