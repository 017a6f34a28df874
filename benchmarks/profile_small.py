"""Where a small GEMM's time goes, by Nsight Compute: for a few small G1000 problems, one launch each of the
data-only floor kernel (benchmarks.latency_floor), cuBLASLt-autotune's configuration and the fastest tiny kernel,
profiled with `ncu` for the SpeedOfLight, LaunchStats, Occupancy and WarpStateStats sections (clocks left alone,
caches not flushed: warm L2 as in kernel mode): duration, compute and memory throughput, grid and block, registers,
shared memory, achieved occupancy and the largest warp stall reasons, side by side per problem.

    python -m benchmarks.profile_small --out OUT/profile_small.json [--keys nn_fp16_1024_1024_64,...]

The command first chooses, outside the profiler, cuBLASLt-autotune's configuration and the fastest tiny kernel of each
problem (each by CUDA-graph timing, as benchmarks.latency_floor does) into MANIFEST, then runs `ncu ... python -m
benchmarks.profile_small --child MANIFEST`, which launches the three once each inside the NVTX range
`cudal2_profile`, the only launches ncu profiles. Rows map to launches by
kernel name: the floor's `move_kernel` opens a problem, `tiny_gemm_kernel` closes it, and the kernels between are
cuBLASLt's (one, or two with a split-K reduction).
"""
from __future__ import annotations

import argparse
import csv
import glob
import io
import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import torch

from cudal2_testing.measure import env

# Small G1000 problems where the tiny family lost to cuBLASLt-autotune and where it won (latency_floor and
# sweep_tiny of b1c4805 on an H100).
DEFAULT_KEYS = ("nn_fp16_1024_1024_64", "nt_fp16_2048_512_64", "nt_fp16_1024_256_256", "nn_fp16_4096_128_128",
                "nt_fp16_16384_64_64", "nt_fp16_64_64_64", "nt_fp16_64_128_4096", "nn_fp16_128_64_8192")
SECTIONS = ("SpeedOfLight", "LaunchStats", "Occupancy", "WarpStateStats")
RANGE = "cudal2_profile"
# ncu raw-page metrics kept per launch (a metric the installed ncu does not report is left out of the row).
METRICS = {"gpu__time_duration.sum": "duration",
           "sm__throughput.avg.pct_of_peak_sustained_elapsed": "compute_pct",
           "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": "memory_pct",
           "dram__throughput.avg.pct_of_peak_sustained_elapsed": "dram_pct",
           "launch__grid_size": "grid", "launch__block_size": "block",
           "launch__registers_per_thread": "registers",
           "launch__shared_mem_per_block_dynamic": "dynamic_smem",
           "sm__warps_active.avg.pct_of_peak_sustained_active": "achieved_occupancy_pct",
           "launch__waves_per_multiprocessor": "waves"}
STALL_MARK = "issue_stalled_"  # warp-state metrics: smsp__average_warp(s|_latency)_issue_stalled_<reason>[_per_...].ratio
TOP_STALLS = 4
CHILD_TIMEOUT_S = 540


def ncu_path() -> str | None:
    """The Nsight Compute CLI: on PATH, else the newest under /opt/nvidia/nsight-compute."""
    return shutil.which("ncu") or next(iter(sorted(glob.glob("/opt/nvidia/nsight-compute/*/ncu"), reverse=True)),
                                       None)


def choose(keys: list[str]) -> list[dict]:
    """Per problem, cuBLASLt-autotune's configuration and the fastest tiny kernel with its knobs, chosen by CUDA-graph
    timing here, before and outside the profiler (timed under ncu, every launch is intercepted and the choice is
    noise: a first version picked tiny kernels timed at about 50 us each)."""
    from benchmarks.latency_floor import tiny_candidates
    from cudal2_ops import tables
    from cudal2_ops.tune import disable_pdl
    from cudal2_testing.kernel_timing import ProblemRun, fastest
    from cudal2_testing.lt_baseline import AutotunedLt

    disable_pdl()
    chosen = []
    for key in keys:
        layout, dtype, m, n, k = tables.parse_key(key)
        run = ProblemRun.random(layout, dtype, m, n, k)
        config = AutotunedLt(layout).select(*run.operands(0), run.out)
        best = (fastest(tiny_candidates(run, layout, dtype), 1) or [None])[0]
        chosen.append({"key": key, "cublaslt_config": config, "tiny": best})
    return chosen


def child(manifest_path: Path) -> int:
    """The profiled program: the manifest's choices warmed up outside the NVTX range, one launch each inside it."""
    from benchmarks.latency_floor import FloorKernels, compile_floor_library
    from cudal2_ops import tables
    from cudal2_ops._extension import _C
    from cudal2_ops.tune import disable_pdl
    from cudal2_testing.kernel_timing import ProblemRun, kernel_impl

    disable_pdl()
    floors = FloorKernels(compile_floor_library(torch.cuda.get_device_capability())[0])
    for entry in json.loads(manifest_path.read_text()):
        layout, dtype, m, n, k = tables.parse_key(entry["key"])
        run = ProblemRun.random(layout, dtype, m, n, k)
        a, b = run.operands(0)
        calls = {"move": lambda: floors.move(a, b, run.out),
                 "cublaslt": lambda: _C.testing.cublaslt_run_config(a, b, None, run.out, layout,
                                                                    entry["cublaslt_config"])}
        if entry["tiny"] is not None:
            best = entry["tiny"]
            tiny = kernel_impl(best["kernel"], layout, (best["splits"], best["swizzle"], best["raster"]))
            calls["tiny"] = lambda: tiny(a, b, None, run.out)
        for call in calls.values():  # warm: modules loaded, attributes set
            call()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_push(RANGE)
        for call in calls.values():
            call()
        torch.cuda.synchronize()
        torch.cuda.nvtx.range_pop()
    return 0


def raw_rows(text: str) -> list[dict]:
    """The launches of ncu's `--csv --page raw` output: one dict per kernel (header row, then a units row)."""
    lines = [line for line in text.splitlines() if line.startswith('"')]
    table = list(csv.reader(io.StringIO("\n".join(lines))))
    if len(table) < 2:
        return []
    header = table[0]
    return [dict(zip(header, row)) for row in table[2:] if row and row[0].isdigit()]


def launch_summary(row: dict) -> dict:
    """Kernel name, the METRICS kept and the TOP_STALLS largest stall reasons (cycles per issued instruction)."""
    out = {"kernel": row.get("Kernel Name", "")[:160]}
    for metric, name in METRICS.items():
        value = row.get(metric, "").replace(",", "")
        if value:
            try:
                out[name] = float(value)
            except ValueError:
                out[name] = value
    stalls = {}
    for metric, value in row.items():
        if metric.startswith("smsp__average_warp") and STALL_MARK in metric and metric.endswith(".ratio"):
            reason = metric.split(STALL_MARK, 1)[1][:-len(".ratio")].split("_per_")[0]
            try:
                stalls[reason] = float(value.replace(",", ""))
            except ValueError:
                continue
    out["top_stalls"] = dict(sorted(stalls.items(), key=lambda kv: -kv[1])[:TOP_STALLS])
    return out


def assign(launches: list[dict], manifest: list[dict]) -> list[dict]:
    """Per problem of `manifest`, its launches by implementation: `move_kernel` opens a problem, `tiny_gemm_kernel`
    closes it, cuBLASLt's kernels lie between (a list: a split-K configuration launches a reduction too)."""
    problems, current = [], None
    for launch in launches:
        name = launch["kernel"]
        if "move_kernel" in name:
            current = {"move": launch, "cublaslt": []}
            problems.append(current)
        elif current is None:
            continue
        elif "tiny_gemm_kernel" in name:
            current["tiny"] = launch
        else:
            current["cublaslt"].append(launch)
    return [{"key": entry["key"], "tiny_kernel": entry["tiny"], **launches_of}
            for entry, launches_of in zip(manifest, problems)]


def problem_line(p: dict) -> str:
    """One line per problem: each implementation's ncu duration (us) and grid."""
    def part(name: str, launch: dict | None) -> str:
        if not launch:
            return f"{name} -"
        return f"{name} {launch.get('duration', 0) / 1e3:.2f} us grid {launch.get('grid', '?')}"
    lt = p.get("cublaslt") or []
    lt_us = sum(x.get("duration", 0) for x in lt) / 1e3
    return (f"{p['key']}: {part('move', p.get('move'))} | cuBLASLt {lt_us:.2f} us in {len(lt)} kernel(s) | "
            f"{part('tiny', p.get('tiny'))}")


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="python -m benchmarks.profile_small", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", default=",".join(DEFAULT_KEYS), help="comma-separated table keys of the problems")
    parser.add_argument("--out", type=Path, help="results JSON")
    parser.add_argument("--child", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    keys = [k for k in args.keys.split(",") if k]
    if not torch.cuda.is_available():
        print("benchmarks.profile_small needs a CUDA GPU", file=sys.stderr)
        return 2
    if args.child:
        return child(args.child)
    if args.out is None:
        parser.error("--out is required")
    ncu = ncu_path()
    if ncu is None:
        print("benchmarks.profile_small needs Nsight Compute's ncu (not on PATH or under /opt/nvidia)",
              file=sys.stderr)
        return 2
    from benchmarks.latency_floor import compile_floor_library

    compile_floor_library(torch.cuda.get_device_capability())  # here, not under the profiler
    t0 = time.monotonic()
    manifest = choose(keys)
    manifest_path = args.out.with_suffix(".manifest.json")
    manifest_path.write_text(json.dumps(manifest))
    cmd = [ncu, "--clock-control", "none", "--cache-control", "none", "--nvtx", "--nvtx-include", f"{RANGE}/",
           *[arg for s in SECTIONS for arg in ("--section", s)], "--csv", "--page", "raw",
           sys.executable, "-m", "benchmarks.profile_small", "--child", str(manifest_path)]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=CHILD_TIMEOUT_S)
    launches = [launch_summary(r) for r in raw_rows(proc.stdout)]
    problems = assign(launches, manifest)
    doc = {"environment": dict(env.header(argv), command="python -m benchmarks.profile_small " + " ".join(argv)),
           "ncu": ncu, "ncu_command": cmd, "returncode": proc.returncode, "seconds": round(time.monotonic() - t0, 1),
           "problems": problems, "launches": launches, "stderr_tail": proc.stderr[-3000:]}
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    for p in problems:
        print(problem_line(p))
    print(f"{len(launches)} launches profiled for {len(problems)} of {len(keys)} problems in {doc['seconds']} s "
          f"(ncu exit {proc.returncode})")
    return 0 if proc.returncode == 0 and len(problems) == len(keys) else 1


if __name__ == "__main__":
    sys.exit(main())
