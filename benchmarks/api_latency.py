"""Eager per-call latency of the public API against torch, and the dispatcher's own CPU cost.

offline mode (docs/EVALUATION.md): host perf_counter around one call with a device synchronize before and after,
fresh inputs written outside the timed region, implementations interleaved in shuffled order. Also: host time to
issue a call (no synchronize; median over a loop), and the C++ decision alone (`_C.testing.time_linear_stages`: routing,
table lookup, cuBLASLt plan lookup), in nanoseconds.

Entry points: the issue time of one decode-shaped linear (x [1, 4096], weight [4096, 4096], fp16) through every way
a model reaches it, patched and not: the host cost that bounds an eager or compiled-without-graphs decode step.
Routes: per route (the dispatcher's table kernel, and cuBLASLt with table kernels switched off), the issue time of
cudal2_ops.linear / matmul against F.linear / torch.matmul on the same problem, and where it goes: the Python wrapper,
the binding entry (pybind), and in C++ the direct-call check, routing, the decision, the output allocation and the
launch (`_C.testing.time_linear_stages`; the launch is the C++ call less the other stages).

    python -m benchmarks.api_latency --out benchmarks/results/<gpu_slug>/api_latency.json
"""
from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F

import cudal2_ops
from cudal2_ops._extension import _C
from cudal2_ops import patch
from cudal2_testing.measure import env, timing
from cudal2_ops.patch import patch_linear, unpatch_linear

SHAPES = [(64, 64, 64), (256, 256, 256), (1024, 1024, 1024), (16, 4096, 4096)]
ENTRY_SHAPE = (1, 4096, 4096)  # (M, N, K): one token through a 4096 x 4096 projection
ITERS = 2000


def issue_us(calls: dict, iters: int = ITERS) -> dict[str, float]:
    """Median host time (us) to issue one call of each of `calls`, from 20 batches of back-to-back calls without
    synchronizing; the calls' batches interleave in rotating order, so a slow spell of the host falls on all alike."""
    per_batch = max(1, iters // 20)
    samples = {name: [] for name in calls}
    names = list(calls)
    for r in range(20):
        for name in names[r % len(names):] + names[:r % len(names)]:
            torch.cuda.synchronize()
            t0 = time.perf_counter()
            for _ in range(per_batch):
                calls[name]()
            samples[name].append((time.perf_counter() - t0) * 1e6 / per_batch)
    torch.cuda.synchronize()
    return {name: statistics.median(values) for name, values in samples.items()}


def measure(shape: tuple[int, int, int], rng: random.Random) -> dict:
    """offline latency, issue time and dispatch cost of cudal2.matmul vs torch.matmul (fp16) for one shape."""
    m, n, k = shape
    a = torch.randn(m, k, device="cuda", dtype=torch.float16)
    b = torch.randn(k, n, device="cuda", dtype=torch.float16)
    fresh = {name: (torch.empty_like(a), torch.empty_like(b)) for name in ("cudal2", "torch")}
    calls = {"cudal2": lambda: cudal2_ops.matmul(*fresh["cudal2"]), "torch": lambda: torch.matmul(*fresh["torch"])}
    refresh = {name: (lambda pair=pair: (pair[0].normal_(), pair[1].normal_())) for name, pair in fresh.items()}
    for call in calls.values():  # warm-up: plans, workspaces, table loading
        call()
    offline = timing.host_mode(calls, refresh, {name: ITERS // 4 for name in calls}, rng)
    return {
        "shape": list(shape),
        "offline_us": {name: offline[name] for name in calls},
        "issue_us": issue_us(calls),
        "dispatch_ns": dispatch_ns(a, b.t()),
        "path": cudal2_ops.explain(a, b).get("kernel") or cudal2_ops.explain(a, b)["path"],
    }


def entry_points(shape: tuple[int, int, int] = ENTRY_SHAPE) -> dict:
    """Issue time (us) of one fp16 linear through each entry point: the public op, the op as compiled code calls it
    (the out= entry point Inductor's lowering emits, and torch.ops, the fallback call of a custom op), nn.Linear patched
    and unpatched, and torch's own calls (F.linear, and mm with out=, what Inductor emits for aten.mm)."""
    m, n, k = shape
    layer = torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.float16)
    x = torch.randn(m, k, device="cuda", dtype=torch.float16)
    w, out = layer.weight.detach(), torch.empty(m, n, device="cuda", dtype=torch.float16)
    calls = {
        "cudal2_ops.linear": lambda: cudal2_ops.linear(x, w),
        "torch.ops.cudal2.linear": lambda: torch.ops.cudal2.linear.default(x, w, None),
        "_C.linear_out": lambda: _C.linear_out(x, w, out=out),
        "F.linear": lambda: F.linear(x, w),
        "torch.mm(out=)": lambda: torch.mm(x, w.t(), out=out),
    }
    # The patched layer's path, piece by piece: its routing check, its read of weight and bias (against nn.Module's
    # attribute lookup, which torch's forward uses), the routed forward without the module call, and the public op
    # with the layer's own nn.Parameter weight.
    patched = {
        "nn.Linear patched": lambda: layer(x),
        "patch: routed forward": lambda: patch._cudal2_linear_forward(layer, x),
        "patch: routing check": lambda: patch._route_dtype(x, layer.weight, None),
        "patch: weight and bias": lambda: patch._linear_params(layer),
        "module attributes weight, bias": lambda: (layer.weight, layer.bias),
        "cudal2_ops.linear(parameter)": lambda: cudal2_ops.linear(x, layer.weight),
    }
    unpatched_layer = torch.nn.Linear(k, n, bias=False, device="cuda", dtype=torch.float16)
    calls["nn.Linear"] = lambda: unpatched_layer(x)
    with torch.no_grad():
        patch_linear(layer)
        try:
            times = issue_us(calls | patched)
        finally:
            unpatch_linear(layer)
    return {"shape": list(shape), "dtype": "fp16", "issue_us": times}


def dispatch_ns(x: torch.Tensor, weight: torch.Tensor) -> float:
    """Host ns of the C++ decision of one call (routing, table lookup or cuBLASLt plan, workspace)."""
    stages = _C.testing.time_linear_stages(x, weight, 100)
    return stages["route"] + stages["decide"]


def linear_stages_us(x: torch.Tensor, weight: torch.Tensor, batches: int = 20, per_batch: int = 100) -> dict:
    """Median over `batches` of the host time (us) per call of each stage of the C++ linear entry; each batch of
    `per_batch` calls starts on an idle GPU, so the launches issue without waiting for queue space."""
    samples: dict[str, list[float]] = {}
    for _ in range(batches):
        torch.cuda.synchronize()
        for stage, ns in _C.testing.time_linear_stages(x, weight, per_batch).items():
            samples.setdefault(stage, []).append(ns / 1e3)
    torch.cuda.synchronize()
    return {stage: statistics.median(values) for stage, values in samples.items()}


def breakdown(issue: dict[str, float], stages: dict[str, float]) -> dict[str, float]:
    """Where one cudal2_ops.linear issue goes (us): Python wrapper (the public function less `_C.linear`), binding
    entry (`_C.linear` less the C++ call), and the C++ stages, the launch being the C++ call less the others."""
    in_cpp = stages["direct_check"] + stages["route"] + stages["decide"] + stages["allocate"]
    return {"python wrapper": issue["cudal2_ops.linear"] - issue["_C.linear"],
            "binding entry": issue["_C.linear"] - stages["call"],
            "direct-call check": stages["direct_check"], "routing": stages["route"], "decision": stages["decide"],
            "allocation": stages["allocate"], "launch": stages["call"] - in_cpp}


def route_costs(shape: tuple[int, int, int] = ENTRY_SHAPE) -> dict:
    """Per route (table kernel; cuBLASLt, table kernels switched off), the issue time (us) of cudal2's linear and
    matmul against torch's on one fp16 problem (weight [N, K]; matmul takes its transposed view, as x @ w.t()), and
    the breakdown of cudal2_ops.linear. The dispatcher's config is set once per route and restored after."""
    m, n, k = shape
    x = torch.randn(m, k, device="cuda", dtype=torch.float16)
    w = torch.randn(n, k, device="cuda", dtype=torch.float16)
    out = torch.empty(m, n, device="cuda", dtype=torch.float16)
    calls = {
        "cudal2_ops.linear": lambda: cudal2_ops.linear(x, w),
        "F.linear": lambda: F.linear(x, w),
        "cudal2_ops.matmul": lambda: cudal2_ops.matmul(x, w.t()),
        "torch.matmul": lambda: torch.matmul(x, w.t()),
        "_C.linear": lambda: _C.linear(x, w),
        "_C.linear_out": lambda: _C.linear_out(x, w, out=out),
    }
    config = _C.get_config()
    result = {"shape": list(shape), "dtype": "fp16", "routes": {}}
    try:
        for route, kernels_enabled in (("table kernel", True), ("cuBLASLt", False)):
            _C.set_config(kernels_enabled, *config[1:])
            info = cudal2_ops.explain(x, w, layout="nt")
            for call in calls.values():  # warm-up: cuBLASLt plan, params cache
                call()
            with torch.no_grad():
                issue = issue_us(calls)
            stages = linear_stages_us(x, w)
            result["routes"][route] = {"path": info.get("kernel") or info["path"], "issue_us": issue,
                                       "cpp_stages_us": stages, "breakdown_us": breakdown(issue, stages)}
    finally:
        _C.set_config(*config)
    return result


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.api_latency",
                                     description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if _C is None or not torch.cuda.is_available():
        print("benchmarks.api_latency needs the compiled extension and a CUDA GPU")
        return 2
    rng = random.Random(0)
    doc = {"environment": env.header(sys.argv[1:]), "protocol": __doc__.split("\n\n")[1],
           "rows": [measure(shape, rng) for shape in SHAPES], "entry_points": entry_points(),
           "routes": route_costs()}
    doc["environment"]["command"] = "python -m benchmarks.api_latency " + " ".join(argv or sys.argv[1:])
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1))
    for row in doc["rows"]:
        off = row["offline_us"]
        print(f"{row['shape']}: offline median cudal2 {off['cudal2']['median_us']:.1f} us vs torch "
              f"{off['torch']['median_us']:.1f} us; issue {row['issue_us']['cudal2']:.2f} vs "
              f"{row['issue_us']['torch']:.2f} us; dispatch {row['dispatch_ns']:.0f} ns ({row['path']})")
    entries = doc["entry_points"]
    print(f"issue time of one linear {entries['shape']}: "
          + ", ".join(f"{name} {us:.2f} us" for name, us in entries["issue_us"].items()))
    for route, row in doc["routes"]["routes"].items():
        issue = row["issue_us"]
        print(f"{route} ({row['path']}), {doc['routes']['shape']}: linear {issue['cudal2_ops.linear']:.2f} us vs "
              f"F.linear {issue['F.linear']:.2f} us; matmul {issue['cudal2_ops.matmul']:.2f} us vs torch.matmul "
              f"{issue['torch.matmul']:.2f} us; breakdown: "
              + ", ".join(f"{name} {us:.2f}" for name, us in row["breakdown_us"].items()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
