"""The measured sweep behind a table: every built kernel against cuBLASLt-autotune, per problem, on this GPU.

For each problem (a stratified G1000 sample, the small G1000 shapes, NT and NN, and LLM decode shapes): the
cuBLASLt-autotune baseline and every kernel of matching dtype/layout that accepts the problem are checked against the
fp32 reference, then timed in kernel mode (CUDA-graph replay, the benchmark suite's timer) in the same process on the
same inputs (warm L2; with --cold-weights rotating over input sets larger than the L2, as LLM decode sees), first with
default runtime knobs (splits = swizzle = raster = 0). Then the KNOB_TOP fastest correct kernels, and the fastest of
every other family (so that each family's best figure is at its best knobs, e.g. split-K for a small-tile kernel
behind another family's default), are timed again under each variant of their family's `knob_grid` (swizzle and raster
order for L2 locality, split-K / stream-K decompositions), each variant checked against the reference first; variants
a kernel rejects are skipped. Every measurement is a candidate carrying its knobs. The fastest correct candidate must
also pass the exact-integer check, run with its knobs, before it is recorded as correct. Problems are swept smallest
first until the time budget is spent (the file records whether the sweep completed).

Cost: knob exploration is bounded to the KNOB_TOP kernels of each problem plus one per other family, each with at
most 11 variants (sm90 stream-K: 8 swizzle x raster + 3 splits; sm90 persistent 8; sm80_cute 4 swizzle x raster + up
to 6 split counts; decode up to 6). On the H200 (`sweep_2026-11-23_cc51879.json.gz`) 643 of the 654 default problems
fit in a 285 s budget, hence the 600 s default budget.

    python -m search.sweep --out sweep.json [--sample 100] [--max-log2-mnk 24] [--llm-max-m 64] [--budget-s 600]
        [--max-m 64] [--min-m 32] [--cold-weights]
    python -m search.table_select sweep.json [later_sweep.json ...]    # -> kernels/<arch_dir>/<gpu_slug>.json
"""
from __future__ import annotations

import argparse
import datetime
import json
import time
import uuid
from pathlib import Path

import torch

from cudal2_catalog.config import DEFAULT_KNOBS, Knobs, config_of
from cudal2_catalog.families import knob_grid
from cudal2_ops._extension import _C
from cudal2_testing.correctness import checks
from cudal2_testing.kernel_timing import (COLD_MAX_SETS, TORCH_DTYPES, ProblemRun, environment, fastest, kernel_impl,
                                          time_call)
from cudal2_testing.measure import shapes as bench_shapes
from cudal2_testing.measure.summary import geomean

PROTOCOL = "kernel mode: CUDA-graph replay of R calls, CUDA events, median of >= 5 replays; warm L2; same inputs"
PROTOCOL_COLD = PROTOCOL.replace("warm L2; same inputs", "cold weights: calls rotate over input sets totalling more "
                                 f"than 4x the L2, at most {COLD_MAX_SETS} (baseline and candidates on the same sets)")
KNOB_TOP = 2  # kernels per problem whose runtime knob grid is explored


# Where issue targets are stated (the sm90 family against cuBLASLt at 4096^3 and 8192^3): always swept.
REFERENCE_SHAPES = ((4096, 4096, 4096), (8192, 8192, 8192))


def problems(sample: int, seed: int, max_log2_mnk: float, llm_max_m: int, llm_dtypes: tuple[str, ...],
             max_m: int | None = None, min_m: int | None = None) -> list[tuple[str, str, int, int, int]]:
    """(layout, dtype, M, N, K): REFERENCE_SHAPES first, then smallest first: a stratified G1000 sample of `sample`
    shapes and every G1000 shape up to 2^max_log2_mnk (nt, nn; fp16), and LLM shapes with M <= llm_max_m (nt;
    llm_dtypes); only those with min_m <= M <= max_m where given."""
    grid = set(bench_shapes.stratified_sample(bench_shapes.g1000(), sample, seed)) if sample else set()
    grid |= {s for s in bench_shapes.g1000() if bench_shapes.log2_mnk(s) <= max_log2_mnk}
    grid |= set(REFERENCE_SHAPES)
    out = {(layout, "fp16", *s) for s in grid for layout in ("nt", "nn")}
    out |= {("nt", dtype, *s) for s in bench_shapes.llm() if s[0] <= llm_max_m for dtype in llm_dtypes}
    out = {p for p in out if (max_m is None or p[2] <= max_m) and (min_m is None or p[2] >= min_m)}
    return sorted(out, key=lambda p: (p[2:] not in REFERENCE_SHAPES, bench_shapes.log2_mnk(p[2:]), p))


def family_of(name: str) -> str | None:
    """The family of a generated kernel's name (None for a kernel from an extra library)."""
    cfg = config_of(name)
    return cfg.family if cfg else None


def knob_targets(cands: list[dict]) -> list[dict]:
    """The candidates whose knob grids are explored: the KNOB_TOP fastest correct ones, then the fastest correct one
    of every family not among them."""
    ranked = fastest(cands, len(cands))
    chosen = ranked[:KNOB_TOP]
    families = {family_of(c["kernel"]) for c in chosen}
    for cand in ranked[KNOB_TOP:]:
        if family_of(cand["kernel"]) not in families:
            chosen.append(cand)
            families.add(family_of(cand["kernel"]))
    return chosen


def measure_kernels(run: ProblemRun, kernels: list[str]) -> list[dict]:
    """Candidates of one problem: every kernel with default knobs, then each variant of the knob grid of the
    kernels `knob_targets` picks."""
    cands = [c for name in kernels if (c := run.candidate(name, DEFAULT_KNOBS)) is not None]
    for top in knob_targets(cands):
        grid = knob_grid(top["kernel"], *run.mnk)
        cands += [c for knobs in grid if (c := run.candidate(top["kernel"], knobs)) is not None]
    return cands


def sweep_problem(layout: str, dtype: str, m: int, n: int, k: int, kernels: list[str], cold: bool = False) -> dict:
    """Baseline and candidate measurements for one problem (`cold`: cold-weight timing, see ProblemRun.random); the
    fastest candidate also gets the exact-integer check."""
    run = ProblemRun.random(layout, dtype, m, n, k, cold)
    row = {"layout": layout, "dtype": dtype, "m": m, "n": n, "k": k, "baseline": "cublaslt-autotune"}
    run.baseline_call("autotune")(0)  # tunes once for this problem
    row["baseline_err"] = run.rel_err()
    row["baseline_us"] = time_call(run.baseline_call("autotune"), run.n_sets)
    row["candidates"] = measure_kernels(run, kernels)
    for best in fastest(row["candidates"], 1):
        exact = checks.check_exact(kernel_impl(best["kernel"], layout, Knobs.from_dict(best)), (m, n, k), layout,
                                   TORCH_DTYPES[dtype], checks.CheckContext())
        best["correct"] = exact.passed
        best["exact_check"] = exact.detail
    return row


def family_summary(rows: list[dict], info: dict[str, dict]) -> dict[str, dict]:
    """Per family: geomean, min and max over problems of (cuBLASLt-autotune time / the family's best correct time),
    with the count of problems it ran and won (> 1.0)."""
    ratios: dict[str, list[float]] = {}
    for row in rows:
        best: dict[str, float] = {}
        for c in row["candidates"]:
            family = info[c["kernel"]]["family"]
            if c.get("us") and c["correct"] and c["us"] < best.get(family, float("inf")):
                best[family] = c["us"]
        for family, us in best.items():
            ratios.setdefault(family, []).append(row["baseline_us"] / us)
    return {family: {"problems": len(r), "geomean": geomean(r), "min": min(r),
                     "max": max(r), "wins": sum(x > 1.0 for x in r)} for family, r in ratios.items()}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m search.sweep",
                                     description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--max-log2-mnk", type=float, default=24.0, help="every G1000 problem up to this size")
    parser.add_argument("--llm-max-m", type=int, default=64, help="LLM problems up to this M")
    parser.add_argument("--llm-dtypes", default="fp16,bf16", help="comma-separated dtypes of the LLM problems")
    parser.add_argument("--budget-s", type=float, default=600.0, help="stop after this long (smallest first)")
    parser.add_argument("--sample", type=int, default=100, help="a stratified G1000 sample of this many shapes")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--max-m", type=int, default=None,
                        help="only problems with M <= this (e.g. re-sweep small M after adding decode kernels; "
                             "table_select merges it over a full sweep)")
    parser.add_argument("--min-m", type=int, default=None,
                        help="only problems with M >= this (with --max-m: one band, e.g. batch-64 decode)")
    parser.add_argument("--cold-weights", action="store_true",
                        help="time every call on rotating input sets totalling more than 4x the L2 (LLM decode, "
                             "where weights come from HBM); default: warm L2, same inputs")
    args = parser.parse_args(argv)
    if _C is None or not torch.cuda.is_available():
        print("search.sweep needs the compiled extension and a CUDA GPU")
        return 2
    kernels = sorted(_C.kernel_names())
    info = {name: _C.kernel_info(name) for name in kernels}
    todo = problems(args.sample, args.seed, args.max_log2_mnk, args.llm_max_m, tuple(args.llm_dtypes.split(",")),
                    args.max_m, args.min_m)
    doc = {"run_id": f"sweep-{datetime.date.today().isoformat()}-{uuid.uuid4().hex[:8]}", "environment": environment(),
           "protocol": PROTOCOL_COLD if args.cold_weights else PROTOCOL, "kernels": kernels, "rows": []}
    t0 = time.monotonic()
    for layout, dtype, m, n, k in todo:
        if time.monotonic() - t0 > args.budget_s:
            break
        names = [nm for nm in kernels if info[nm]["layout"] == layout and info[nm]["dtype"] == dtype]
        doc["rows"].append(sweep_problem(layout, dtype, m, n, k, names, args.cold_weights))
    doc["wall_s"] = round(time.monotonic() - t0, 1)
    doc["complete"] = len(doc["rows"]) == len(todo)
    doc["family_summary"] = family_summary(doc["rows"], info)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1))
    wins = sum(1 for r in doc["rows"] if any(c.get("us") and c["correct"] and c["us"] < r["baseline_us"]
                                             for c in r["candidates"]))
    print(f"swept {len(doc['rows'])}/{len(todo)} problems in {doc['wall_s']} s; a correct kernel beat "
          f"cuBLASLt-autotune on {wins}")
    for family, stats in doc["family_summary"].items():
        print(f"  {family}: best-of-family vs cuBLASLt-autotune geomean {stats['geomean']:.3f} "
              f"(min {stats['min']:.3f}, max {stats['max']:.3f}), wins {stats['wins']}/{stats['problems']}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
