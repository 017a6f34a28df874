"""The judge's rate on this GPU, and its verdicts on kernels it once flagged wrongly, in one short GPU call.

Evaluates a fixed set of installed (prebuilt, no compile) fp16 NT kernels on a fixed set of problems, small to
large as in a G1000 sample, through the evaluator pool as the search does (batches of one problem's candidates),
twice: a cold pass (each problem's baseline timed, each binary's own checks run) and a warm pass (the search's later
rounds: baselines and binary checks reused). Prints the judge's start-up time, evaluations per minute of each pass,
the verdicts by status, and the verdict, time and compute floor of each re-checked (kernel, knobs, problem) that an
earlier judge called SUSPICIOUS (an honest library kernel below the compute floor, or a wall clock over the bound).

    CUDA_VISIBLE_DEVICES=0 python -m search.judge_bench [--per-problem 4] [--json out.json] [--profile out.txt]

`--profile` then judges the same work once more in this process (the judge's code, `GpuEvaluator`, with candidates
still run by their own runner processes) under cProfile, and writes where the judge's time goes: the seconds spent
in each of its phases (baseline, correctness checks, capture, timed replays, eager wall clock, runner start-up) and
the 40 functions with the most cumulative time.
"""
from __future__ import annotations

import argparse
import collections
import cProfile
import io
import json
import pstats
import time
from pathlib import Path

from search.backends.local import nvcc_archs
from search.candidate import OK, UNSUPPORTED, Candidate, Problem
from search.candidate_space import check
from search.compile_farm import installed_kernels
from search.evaluator import EvaluatorPool
from search.loop import RunArgs

PROBLEMS = [Problem("nt", "fp16", m, n, k) for m, n, k in (
    (128, 128, 64), (1024, 128, 64), (512, 64, 256), (64, 256, 2048), (1024, 64, 1024), (128, 4096, 256),
    (2048, 512, 4096), (8192, 128, 8192), (4096, 1024, 16384))]
# (config, knobs, problem) flagged SUSPICIOUS by the judge of 2026-11-25 on an H100 (store search_h100_throughput).
RECHECK = [
    ("sm90_tma_ws_fp16_nt_128x128x64_s0_c1x2_pingpong_persistent", (0, 0, 0), (4096, 1024, 16384)),
    ("sm90_tma_ws_fp16_nt_64x256x64_s0_c2x1_pingpong_persistent", (0, 0, 0), (4096, 1024, 16384)),
    ("sm90_tma_ws_fp16_nt_128x128x64_s0_c2x1_pingpong_persistent", (2, 2, 1), (4096, 1024, 16384)),
    ("sm90_tma_ws_fp16_nt_128x256x64_s0_c2x1_coop_persistent", (16, 4, 0), (8192, 8192, 2048)),
    ("sm90_tma_ws_fp16_nt_64x128x64_s0_c1x1_pingpong_persistent", (0, 0, 0), (8192, 128, 8192)),
    ("tiny_fp16_nt_64x128x64_s3_w16", (0, 0, 0), (8192, 128, 8192)),
    ("sm80_cute_fp16_nt_64x128x64_s3_w4", (32, 16, 0), (1024, 128, 64)),
    ("sm90_tma_ws_fp16_nt_128x128x32_s5_c1x2_pingpong_persistent_swap", (16, 4, 2), (1024, 128, 64)),
]


def requests(per_problem: int, arch: int, kernels: dict[str, Path]) -> list[tuple[Candidate, Problem, str]]:
    """`per_problem` installed kernels feasible for each problem (the same choice on every run)."""
    out = []
    for problem in PROBLEMS:
        feasible = [Candidate(config=name, provenance="bench") for name in sorted(kernels)]
        feasible = [c for c in feasible if check(c, problem, arch)[0]]
        step = max(1, len(feasible) // per_problem)
        out += [(c, problem, str(kernels[c.config])) for c in feasible[::step][:per_problem]]
    return out


def recheck_requests(arch: int, kernels: dict[str, Path]) -> list[tuple[Candidate, Problem, str]]:
    out = []
    for config, knobs, (m, n, k) in RECHECK:
        cand, problem = Candidate(config=config, knobs=knobs, provenance="bench"), Problem("nt", "fp16", m, n, k)
        if config in kernels and check(cand, problem, arch)[0]:
            out.append((cand, problem, str(kernels[config])))
    return out


# The judge's phases (search.eval_worker.GpuEvaluator and the runner client), as cProfile names their functions.
PHASES = {"baseline (once per problem)": "_baselines", "correctness checks": "_correctness",
          "graph capture": "_capture", "timed replays and their output checks": "_time_case",
          "eager wall clock (inside the first case's timing)": "_eager_wall_us", "runner round trips": "_round_trip_s",
          "runner start or kernel load": "_runner", "case inputs and references": "fill"}


def profile_judge(work: list, cases: int) -> str:
    """The judge's phases and its 40 costliest functions (cumulative) over two passes of `work` in this process."""
    from search.eval_worker import GpuEvaluator  # noqa: PLC0415 (imports torch and the extension)
    judge = GpuEvaluator()
    by_problem: dict[str, dict] = {}
    for cand, problem, artifact in work:
        request = by_problem.setdefault(problem.key, {"problem": problem.__dict__, "candidates": [], "cases": cases,
                                                      "timeout_s": 300.0, "baseline": None})
        request["candidates"].append({"candidate": cand.to_json(), "artifact": artifact})
    profiler = cProfile.Profile()
    start = time.monotonic()
    profiler.enable()
    for _ in range(2):   # cold (baselines timed) then warm (baseline documents reused)
        for request in by_problem.values():
            for result in judge.judge(request):
                request["baseline"] = result.baseline_cases
    profiler.disable()
    wall = time.monotonic() - start
    text = io.StringIO()
    stats = pstats.Stats(profiler, stream=text)
    lines = [f"{2 * len(work)} evaluations in {wall:.1f} s in-process ({120 * len(work) / wall:.0f} per minute)", "",
             "phase: cumulative seconds (share of the wall time)"]
    for label, name in PHASES.items():
        seconds = sum(v[3] for k, v in stats.stats.items() if k[2] == name and ("search" in k[0] or "cudal2" in k[0]))
        lines.append(f"  {label}: {seconds:.2f} s ({100 * seconds / wall:.0f}%)")
    stats.sort_stats("cumulative").print_stats(40)
    return "\n".join(lines) + "\n\n" + text.getvalue()


def timed_pass(pool: EvaluatorPool, work: list) -> tuple[float, list]:
    start = time.monotonic()
    results = pool.evaluate(work)
    return time.monotonic() - start, results


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m search.judge_bench", description=__doc__.splitlines()[0])
    parser.add_argument("--per-problem", type=int, default=RunArgs.per_round,
                        help=f"installed kernels per problem, one batch (default {RunArgs.per_round}: a search round's "
                             "proposals per problem, so the rate is a search's)")
    parser.add_argument("--json", type=Path, help="also write the figures and verdicts here")
    parser.add_argument("--profile", type=Path, help="also profile the judge in this process; the phases go here")
    args = parser.parse_args()
    import torch  # noqa: PLC0415 (only for the device's capability)
    major, minor = torch.cuda.get_device_capability()
    arch = major * 10 + minor
    kernels = installed_kernels(nvcc_archs(arch))
    if not kernels:
        raise SystemExit("no installed kernel library for this GPU (build the package first)")
    work = requests(args.per_problem, arch, kernels)
    pool = EvaluatorPool(["0"], timeout_s=300.0, cases=3, batch=args.per_problem)
    try:
        start = time.monotonic()
        environment = pool.environment()
        startup_s = time.monotonic() - start
        cold_s, cold = timed_pass(pool, work)
        warm_s, warm = timed_pass(pool, work)
        rechecked = recheck_requests(arch, kernels)
        _, verdicts = timed_pass(pool, rechecked)
    finally:
        pool.close()
    report = {"gpu": environment.get("gpu_name"), "peak_tflops": environment.get("peak_tflops"),
              "startup_s": startup_s, "evaluations": len(work),
              "cold": {"seconds": cold_s, "per_minute": 60 * len(work) / cold_s,
                       "statuses": dict(collections.Counter(r.status for r in cold))},
              "warm": {"seconds": warm_s, "per_minute": 60 * len(work) / warm_s,
                       "statuses": dict(collections.Counter(r.status for r in warm))},
              "per_minute_with_startup": 60 * 2 * len(work) / (startup_s + cold_s + warm_s), "recheck": []}
    for (cand, problem, _), r in zip(rechecked, verdicts):
        floor_us = 2 * problem.m * problem.n * problem.k / (environment["peak_tflops"] * 1e6)
        report["recheck"].append({"kernel": cand.config, "knobs": list(cand.knobs), "problem": problem.key,
                                  "status": r.status, "us": r.us, "baseline_us": r.baseline_us,
                                  "floor_us": floor_us, "reason": r.reason})
    print(f"{report['gpu']}: judge start-up {startup_s:.1f} s; {len(work)} evaluations on {len(PROBLEMS)} problems")
    for name in ("cold", "warm"):
        p = report[name]
        print(f"  {name}: {p['seconds']:.1f} s, {p['per_minute']:.0f} evaluations per minute, {p['statuses']}")
    print(f"  both passes with start-up: {report['per_minute_with_startup']:.0f} evaluations per minute")
    print("re-checked (earlier false SUSPICIOUS verdicts):")
    for row in report["recheck"]:
        print(f"  {row['kernel']} {row['knobs']} {row['problem']}: {row['status']} us={row['us']} "
              f"base={row['baseline_us']} floor={row['floor_us']:.1f} {row['reason'][:300]}")
    unexplained = [r for r in cold + warm if r.status not in (OK, UNSUPPORTED)]
    for r in unexplained:
        print(f"  not ok: {r.status} {r.reason[:300]}")
    if args.json:
        args.json.write_text(json.dumps(report, indent=1))
    if args.profile:
        args.profile.write_text(profile_judge(work, cases=3))
        print(args.profile.read_text().split("\n\n")[1])


if __name__ == "__main__":
    main()
