"""The latency floor of small GEMMs: what any kernel must pay, beside what cuBLASLt-autotune and the tiny family pay.

Problems: the G1000 shapes (cudal2_testing/measure/shapes.py) with M*N*K <= 2^--max-log2-mnk (default 26) and
K >= --min-k (default 0), per layout and dtype, visited smallest first; warm L2, the same inputs every call. Per
problem, in kernel mode (cudal2_testing.kernel_timing.time_call: CUDA-graph replay of R back-to-back calls, CUDA
events, median per call):
  empty_us      an empty kernel (1 CTA of 32 threads): the cost of a kernel node itself, measured once per run
                before the problems and once after them (both recorded; fractions use the first);
  move_us       a kernel that only moves the problem's data: reads every byte of A and B once and writes every element
                of C, each C value folded from loaded words (a dependent load -> store round trip, no math), spread
                over threads of at most 4 16-byte chunks each (benchmarks/latency_floor_kernels.cu);
  cublaslt_us   cuBLASLt-autotune (the configuration chosen by replay on the problem's first call, kept after);
  tiny          the fastest correct tiny kernel of the installed library at its automatic split and each split of
                its knob grid (kernel, splits, us, relative error; every tiny candidate in `tiny_candidates`).
Each row's `floor_fraction` gives floor / time (1 = at the floor) of cuBLASLt-autotune and of the best tiny kernel
against each floor, so that a note can say what fraction of the floor each reaches.

The floor kernels are compiled here, at run time, with the toolkit's nvcc into a small torch-free shared library
(build/latency_floor/, keyed on the source and the GPU's compute capability; reused when present) and called through
ctypes on the current stream, so CUDA-graph capture records them like any kernel. Why not torch's load_inline: it
compiles the torch headers (about a minute on a few cores, at the brief's 60 s limit, paid on the GPU's clock on
every fresh machine); nvcc on this one torch-free file takes a few seconds (the run records the time). Why not the
testing bindings: the floor kernels are a benchmark's probe, not a user or test entry point, and the extension's build
should not compile them.

    python -m benchmarks.latency_floor --out OUT/latency_floor.json [--layouts nn,nt] [--dtypes fp16]
        [--max-log2-mnk 26] [--min-k 2048] [--budget-s 300]
"""
from __future__ import annotations

import argparse
import ctypes
import hashlib
import math
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch

from benchmarks import results
from build_tools import kernel_lib
from cudal2_catalog.config import DEFAULT_KNOBS
from cudal2_catalog.families import knob_grid
from cudal2_catalog.families.tiny import MAX_SPLITS
from cudal2_ops.tune import runnable_kernels
from cudal2_testing.kernel_timing import ProblemRun, fastest, time_call
from cudal2_testing.measure import env, shapes

REPO = Path(__file__).resolve().parents[1]
FLOOR_SOURCE = Path(__file__).with_name("latency_floor_kernels.cu")
FLOOR_BUILD_DIR = REPO / "build" / "latency_floor"
COMPILE_TIMEOUT_S = 120
PROTOCOL = {"mode": "kernel", "timing": "CUDA-graph replay of R back-to-back calls, CUDA events, median per call",
            "l2": "warm (the same inputs every call)", "floors": "empty kernel; read A and B, write C, no math"}


class FloorKernels:
    """The compiled floor kernels (ctypes), launched on torch's current stream."""

    def __init__(self, library: Path) -> None:
        self.lib = ctypes.CDLL(str(library))
        self.lib.floor_empty.argtypes = [ctypes.c_void_p]
        self.lib.floor_move.argtypes = [ctypes.c_void_p, ctypes.c_longlong, ctypes.c_void_p, ctypes.c_longlong,
                                        ctypes.c_void_p, ctypes.c_longlong, ctypes.c_void_p]
        for fn in (self.lib.floor_empty, self.lib.floor_move):
            fn.restype = ctypes.c_int

    @staticmethod
    def _stream() -> int:
        return torch.cuda.current_stream().cuda_stream

    @staticmethod
    def _check(status: int, what: str) -> None:
        if status != 0:
            raise RuntimeError(f"latency floor: {what} failed to launch (cudaError {status})")

    def empty(self) -> None:
        """Enqueues the empty kernel."""
        self._check(self.lib.floor_empty(self._stream()), "the empty kernel")

    def move(self, a: torch.Tensor, b: torch.Tensor, out: torch.Tensor) -> None:
        """Enqueues the data-only kernel on contiguous a, b and out."""
        if not all(t.is_contiguous() and t.data_ptr() % 16 == 0 for t in (a, b, out)):
            raise ValueError("latency floor: a, b and out must be contiguous and 16-byte aligned")
        self._check(self.lib.floor_move(a.data_ptr(), a.numel(), b.data_ptr(), b.numel(), out.data_ptr(),
                                        out.numel(), self._stream()), "the data-only kernel")


def floor_library_path(capability: tuple[int, int], build_dir: Path = FLOOR_BUILD_DIR) -> Path:
    """Where the floor library for compute capability `capability` lives: named by the source's digest."""
    digest = hashlib.sha256(FLOOR_SOURCE.read_bytes()).hexdigest()[:12]
    return build_dir / f"latency_floor_sm{capability[0]}{capability[1]}_{digest}.so"


def compile_floor_library(capability: tuple[int, int], build_dir: Path = FLOOR_BUILD_DIR) -> tuple[Path, float]:
    """The floor library for `capability` (compiled with nvcc unless already built) and the compile's seconds (0
    when reused)."""
    out = floor_library_path(capability, build_dir)
    if out.exists():
        return out, 0.0
    out.parent.mkdir(parents=True, exist_ok=True)
    arch = f"sm_{capability[0]}{capability[1]}"
    tmp = out.with_name(out.name + ".tmp")
    cmd = [kernel_lib.nvcc_path(), "-O3", "-std=c++17", "-shared", "-Xcompiler=-fPIC", f"-arch={arch}",
           str(FLOOR_SOURCE), "-o", str(tmp)]
    t0 = time.monotonic()
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=COMPILE_TIMEOUT_S)
    if proc.returncode != 0:
        raise RuntimeError(f"latency floor: nvcc failed ({' '.join(cmd)}):\n{proc.stderr[-3000:]}")
    tmp.replace(out)
    return out, time.monotonic() - t0


def problems(layouts: list[str], dtypes: list[str], max_log2_mnk: float,
             min_k: int = 0) -> list[tuple[str, str, int, int, int]]:
    """(layout, dtype, M, N, K) of the G1000 shapes with log2(M*N*K) <= max_log2_mnk and K >= min_k, smallest
    M*N*K first."""
    small = sorted((s for s in shapes.g1000() if shapes.log2_mnk(s) <= max_log2_mnk and s[2] >= min_k),
                   key=lambda s: (s[0] * s[1] * s[2], s))
    return [(layout, dtype, *s) for s in small for layout in layouts for dtype in dtypes]


def floor_fraction(floor_us: float, us: float | None) -> float | None:
    """floor / time: 1 at the floor, smaller above it; None when untimed."""
    return floor_us / us if us else None


def tiny_candidates(run: ProblemRun, layout: str, dtype: str) -> list[dict]:
    """Every tiny kernel of the installed library at its automatic split and each split of its knob grid, timed on
    `run` (`ProblemRun.candidate` rows; kernels that decline the problem left out)."""
    m, n, k = run.mnk
    return [cand for name in runnable_kernels(layout, dtype, "tiny")
            for knobs in [DEFAULT_KNOBS, *knob_grid(name, m, n, k)]
            if (cand := run.candidate(name, knobs)) is not None]


def measure_problem(floors: FloorKernels, empty_us: float, layout: str, dtype: str, m: int, n: int, k: int) -> dict:
    """One row: the data-only floor, cuBLASLt-autotune and every tiny kernel x split on the same inputs."""
    run = ProblemRun.random(layout, dtype, m, n, k)
    move_us = time_call(lambda i: floors.move(run.a, run.b, run.out))
    run.baseline_call("autotune")(0)  # tunes once for this problem, outside any capture
    lt_err = run.rel_err()
    lt_us = time_call(run.baseline_call("autotune")) if lt_err <= run.tol else None
    cands = tiny_candidates(run, layout, dtype)
    best = (fastest(cands, 1) or [None])[0]
    tiny_us = best["us"] if best else None
    return {"m": m, "n": n, "k": k, "dtype": dtype, "layout": layout, "impl": "latency_floor", "mode": "kernel",
            "log2_mnk": round(math.log2(m * n * k), 2), "bytes": (m * k + k * n + m * n) * 2,
            "empty_us": empty_us, "move_us": move_us, "cublaslt_us": lt_us, "cublaslt_err": lt_err,
            "tiny": best, "tiny_candidates": cands,
            "floor_fraction": {"cublaslt_of_empty": floor_fraction(empty_us, lt_us),
                               "cublaslt_of_move": floor_fraction(move_us, lt_us),
                               "tiny_of_empty": floor_fraction(empty_us, tiny_us),
                               "tiny_of_move": floor_fraction(move_us, tiny_us)}}


def summarize(rows: list[dict]) -> dict:
    """Median and min of each floor fraction over the rows where it was measured, and the median times."""
    out = {"problems": len(rows)}
    for key in ("cublaslt_of_empty", "cublaslt_of_move", "tiny_of_empty", "tiny_of_move"):
        values = [r["floor_fraction"][key] for r in rows if r["floor_fraction"][key] is not None]
        out[key] = {"n": len(values), "median": statistics.median(values) if values else None,
                    "min": min(values) if values else None}
    for key in ("move_us", "cublaslt_us"):
        values = [r[key] for r in rows if r[key] is not None]
        out[f"median_{key}"] = statistics.median(values) if values else None
    tiny_us = [r["tiny"]["us"] for r in rows if r["tiny"]]
    out["median_tiny_us"] = statistics.median(tiny_us) if tiny_us else None
    out["grid_of_cluster"] = grid_of_cluster(rows)
    return out


def grid_of_cluster(rows: list[dict]) -> dict:
    """The tiny family's grid-wide split against its cluster split: per problem the fastest correct candidate with
    more splits than a cluster holds over the fastest with at most that many (the automatic split included); the
    geomean, the range and the problems where the grid-wide one is faster, over the problems that timed both."""
    ratios = []
    for r in rows:
        correct = [c for c in r["tiny_candidates"] if c["correct"] and c["us"]]
        grid = [c["us"] for c in correct if c["splits"] > MAX_SPLITS]
        cluster = [c["us"] for c in correct if c["splits"] <= MAX_SPLITS]
        if grid and cluster:
            ratios.append(min(grid) / min(cluster))
    if not ratios:
        return {"n": 0}
    return {"n": len(ratios), "geomean": math.exp(statistics.fmean(map(math.log, ratios))), "min": min(ratios),
            "max": max(ratios), "grid_faster": sum(x < 1 for x in ratios)}


def problem_line(row: dict) -> str:
    """One progress line per problem."""
    def us(x):
        return "-" if x is None else f"{x:.2f}"
    best = row["tiny"] or {}
    return (f"{row['layout']} {row['dtype']} {row['m']}x{row['n']}x{row['k']}: empty {us(row['empty_us'])} | move "
            f"{us(row['move_us'])} | cuBLASLt-autotune {us(row['cublaslt_us'])} | tiny {best.get('kernel', '-')} "
            f"splits={best.get('splits', '-')} {us(best.get('us'))} us")


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.latency_floor", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, required=True, help="results JSON (rewritten after every problem)")
    p.add_argument("--layouts", default="nn,nt", help="comma-separated, from nn,nt")
    p.add_argument("--dtypes", default="fp16", help="comma-separated, from fp16,bf16")
    p.add_argument("--max-log2-mnk", type=float, default=26.0, help="only problems with M*N*K <= 2^this")
    p.add_argument("--min-k", type=int, default=0, help="only problems with K >= this (e.g. 2048: the long-K ones)")
    p.add_argument("--budget-s", type=float, default=300.0, help="start no problem after this many seconds")
    args = p.parse_args(argv)
    args.layouts = [x for x in args.layouts.split(",") if x]
    args.dtypes = [x for x in args.dtypes.split(",") if x]
    if not args.layouts or any(x not in ("nn", "nt") for x in args.layouts):
        p.error("--layouts: choose from nn, nt")
    if not args.dtypes or any(x not in ("fp16", "bf16") for x in args.dtypes):
        p.error("--dtypes: choose from fp16, bf16")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    from cudal2_ops._extension import _C

    if _C is None or not torch.cuda.is_available():
        print("benchmarks.latency_floor needs the compiled extension and a CUDA GPU")
        return 2
    t0 = time.monotonic()
    library, compile_s = compile_floor_library(torch.cuda.get_device_capability())
    floors = FloorKernels(library)
    header = env.header(argv) | {"command": "python -m benchmarks.latency_floor " + " ".join(argv)}
    doc = results.new_document(header, PROTOCOL | {"floor_library": library.name,
                                                   "floor_compile_s": round(compile_s, 2)})
    empty_us = time_call(lambda i: floors.empty())
    doc["empty_kernel_us"] = {"before": empty_us}
    print(f"floor library {library.name} (compiled in {compile_s:.1f} s); empty kernel {empty_us:.3f} us")
    todo = problems(args.layouts, args.dtypes, args.max_log2_mnk, args.min_k)
    for layout, dtype, m, n, k in todo:
        if time.monotonic() - t0 > args.budget_s:
            break
        row = measure_problem(floors, empty_us, layout, dtype, m, n, k)
        doc["rows"].append(row)
        print(problem_line(row), flush=True)
        doc["summary"] = summarize(doc["rows"])
        results.save(args.out, doc)
    doc["empty_kernel_us"]["after"] = time_call(lambda i: floors.empty())
    doc["complete"] = len(doc["rows"]) == len(todo)
    doc["wall_s"] = round(time.monotonic() - t0, 1)
    doc["summary"] = summarize(doc["rows"])
    results.save(args.out, doc)
    s = doc["summary"]
    print(f"empty kernel {empty_us:.3f} us before, {doc['empty_kernel_us']['after']:.3f} us after; "
          f"{len(doc['rows'])} of {len(todo)} problems in {doc['wall_s']} s")
    for key in ("cublaslt_of_empty", "cublaslt_of_move", "tiny_of_empty", "tiny_of_move"):
        median = s[key]["median"]
        print(f"  floor / time, {key}: median {'-' if median is None else f'{median:.3f}'} over {s[key]['n']}")
    grid = s["grid_of_cluster"]
    if grid["n"]:
        print(f"  tiny grid-wide / cluster split, best of each: geomean {grid['geomean']:.3f} ({grid['min']:.2f}-"
              f"{grid['max']:.2f}) over {grid['n']}, grid-wide faster on {grid['grid_faster']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
