"""`python -m cudal2_ops`: info (GPU, build, table coverage), check (self-test against torch), bench (quick timing).

Without a GPU each command says so and runs what can run (the build and table facts; the self-test on CPU tensors,
where every call runs torch).
"""
from __future__ import annotations

import argparse
import json
import sys
import time

import torch
import torch.nn.functional as F

import cudal2_ops
from cudal2_ops import _extension, tables

CHECK_SHAPES = [(1, 1, 1), (7, 65, 1000), (64, 64, 64), (127, 4097, 63), (256, 1024, 512), (1000, 3, 8)]
BENCH_SHAPES = [(64, 64, 64), (256, 256, 256), (1024, 1024, 1024), (16, 4096, 4096), (4096, 4096, 4096)]


def info() -> dict:
    """Build, GPU and table facts."""
    out: dict = {
        "cudal2_ops": cudal2_ops.__version__,
        "torch": torch.__version__,
        "cuda_runtime": torch.version.cuda,
        "extension": "loaded" if cudal2_ops.is_compiled() else f"missing ({_extension.IMPORT_ERROR})",
        "kernel_libraries": _extension.LOADED_LIBRARIES,
        "kernels": sorted(_extension._C.kernel_names()) if _extension._C is not None else [],
    }
    if not torch.cuda.is_available():
        out["gpu"] = "none visible: every call runs torch"
        return out
    facts = tables.DeviceFacts.of(torch.cuda.current_device())
    out["gpu"] = {"name": facts.gpu_name, "sm_count": facts.sm_count, "capability": list(facts.capability)}
    path = tables.find_table_file(facts)
    table = tables.load_table_for(facts)
    out["table"] = {"file": str(path) if path else None, "accepted": table is not None,
                    "entries": len(table.entries) if table else 0,
                    "kernels": len({e["kernel"] for e in table.entries.values() if "kernel" in e}) if table else 0,
                    "cublaslt_configs": sum("cublaslt" in e for e in table.entries.values()) if table else 0}
    return out


def check(device: str) -> list[dict]:
    """Compares matmul/linear with torch on a few odd shapes, fp16 and bf16 (fp32 reference)."""
    rows = []
    dtypes = (torch.float16, torch.bfloat16) if device == "cuda" else (torch.float32,)
    gen = torch.Generator(device="cpu").manual_seed(0)
    for dtype in dtypes:
        for m, n, k in CHECK_SHAPES:
            a = torch.randn(m, k, generator=gen).to(device, dtype)
            w = torch.randn(n, k, generator=gen).to(device, dtype)
            bias = torch.randn(n, generator=gen).to(device, dtype)
            ref = F.linear(a.float(), w.float(), bias.float())
            for name, got in (("matmul", cudal2_ops.matmul(a, w.t().contiguous())), ("linear",
                                                                                     cudal2_ops.linear(a, w, bias))):
                expect = ref - bias.float() if name == "matmul" else ref
                err = ((got.float() - expect).norm() / expect.norm().clamp_min(1e-12)).item()
                tol = 8e-3 if dtype == torch.bfloat16 else 1e-3
                rows.append({"op": name, "dtype": str(dtype).split(".")[1], "shape": [m, n, k],
                             "rel_err": err, "ok": err <= tol})
    return rows


def _time_kernel(fn, reps: int = 20) -> float:
    """Median per-call GPU time (us) of `fn` by CUDA-graph replay of `reps` calls."""
    fn()
    stream = torch.cuda.Stream()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.stream(stream):
        fn()
        torch.cuda.synchronize()
        with torch.cuda.graph(graph, stream=stream):
            for _ in range(reps):
                fn()
    times = []
    for _ in range(5):
        start, stop = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        stop.record()
        stop.synchronize()
        times.append(start.elapsed_time(stop) * 1e3 / reps)
    return sorted(times)[len(times) // 2]


def bench() -> list[dict]:
    """Quick kernel-time comparison of cudal2.linear against F.linear (fp16)."""
    rows = []
    for m, n, k in BENCH_SHAPES:
        x = torch.randn(m, k, device="cuda", dtype=torch.float16)
        w = torch.randn(n, k, device="cuda", dtype=torch.float16)
        t_ours = _time_kernel(lambda: cudal2_ops.linear(x, w))
        t_torch = _time_kernel(lambda: F.linear(x, w))
        rows.append({"shape": [m, n, k], "cudal2_us": round(t_ours, 2), "torch_us": round(t_torch, 2),
                     "speedup": round(t_torch / t_ours, 3),
                     "path": cudal2_ops.explain(x, w, layout="nt").get("kernel", "cublaslt")})
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m cudal2_ops", description=__doc__)
    parser.add_argument("command", choices=["info", "check", "bench"])
    args = parser.parse_args(argv)
    has_gpu = torch.cuda.is_available()
    if args.command == "info":
        print(json.dumps(info(), indent=2))
        return 0
    if args.command == "check":
        if not has_gpu:
            print("no CUDA GPU visible: checking the torch fallback on CPU tensors only")
        t0 = time.perf_counter()
        rows = check("cuda" if has_gpu else "cpu")
        for row in rows:
            print(json.dumps(row))
        failures = [r for r in rows if not r["ok"]]
        print(f"{len(rows) - len(failures)}/{len(rows)} checks passed in {time.perf_counter() - t0:.1f} s")
        return 1 if failures else 0
    if not has_gpu:
        print("no CUDA GPU visible: nothing to benchmark (kernels and cuBLASLt need a GPU)")
        return 0
    for row in bench():
        print(json.dumps(row))
    return 0


if __name__ == "__main__":
    sys.exit(main())
