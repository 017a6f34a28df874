"""Does cudal2's cuBLASLt route cost GPU time? For small G1000 problems, the same cuBLASLt configuration timed three
ways by CUDA-graph replay (PDL off), interleaved: called directly on the baseline instance (its own handle), called
directly on the dispatcher's instance, and through the public API with a table entry naming it. Any gap between the
first and the last is the route's cost per call; the configuration is the one cuBLASLt-autotune picks.

    python -m benchmarks.lt_route_overhead --count 40 --out OUT/lt_route_overhead.json
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
from pathlib import Path

import torch

from cudal2_testing.measure import env, shapes


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.lt_route_overhead", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--count", type=int, default=40, help="problems (a stratified sample below 2^28 FLOPs)")
    parser.add_argument("--rounds", type=int, default=3, help="interleaved timing rounds per problem")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    from cudal2_ops import tables, tune

    tune.disable_pdl()
    from cudal2_ops._extension import _C
    from cudal2_testing import lt_baseline

    small = [s for s in shapes.g1000() if shapes.log2_mnk(s) < 28]
    problems = [tune.Problem(layout, "fp16", *s) for s in shapes.stratified_sample(small, args.count, 0)
                for layout in ("nn", "nt")]
    runs = {p: tune.ProblemRun.make(p) for p in problems}
    configs = {p: lt_baseline.AutotunedLt(p.layout).select(r.a, r.b, r.out) for p, r in runs.items()}
    table = {"header": {**tune.table_header(torch.cuda.current_device(), None)},
             "entries": {p.key: {"cublaslt": dict(zip(tables.LT_CONFIG_FIELDS, configs[p]))} for p in problems}}
    table_file = Path(tempfile.mkdtemp()) / "route_table.json"
    table_file.write_text(json.dumps(table))
    os.environ["CUDAL2_TABLE"] = str(table_file)
    os.environ["CUDAL2_TUNED_TABLE"] = str(table_file.with_name("none.json"))
    import cudal2_ops

    rows = []
    for p, r in runs.items():
        config = configs[p]
        api = ((lambda r=r: cudal2_ops.matmul(r.a, r.b, out=r.out)) if p.layout == "nn"
               else (lambda r=r: cudal2_ops.linear(r.a, r.b)))
        ways = {"baseline_direct": lambda r=r, c=config: _C.testing.cublaslt_run_config(r.a, r.b, None, r.out,
                                                                                        p.layout, c),
                "dispatcher_direct": lambda r=r, c=config: r.run_config(c),
                "public_api": api}
        times = {name: [] for name in ways}
        for _ in range(args.rounds):
            for name, fn in ways.items():
                times[name].append(tune.graph_time_us(fn, target_us=500.0, replays=5))
        explain = cudal2_ops.explain(r.a, r.b, layout=p.layout)
        rows.append({"problem": p.key, "policy": explain.get("cublaslt_policy"), "path": explain["path"],
                     **{name: statistics.median(t) for name, t in times.items()}})
    gap = [row["public_api"] - row["baseline_direct"] for row in rows]
    summary = {"problems": len(rows), "median_gap_us": round(statistics.median(gap), 4),
               "mean_gap_us": round(statistics.fmean(gap), 4),
               "median_ratio_baseline_over_api": round(statistics.median(
                   row["baseline_direct"] / row["public_api"] for row in rows), 4),
               "median_ratio_baseline_over_dispatcher_direct": round(statistics.median(
                   row["baseline_direct"] / row["dispatcher_direct"] for row in rows), 4),
               "all_table_policy": all(row["policy"] == "table" for row in rows)}
    args.out.write_text(json.dumps({"environment": dict(env.header(sys.argv[1:]), command=" ".join(sys.argv)),
                                    "summary": summary, "rows": rows}, indent=1) + "\n")
    print(json.dumps(summary))
    return 0


if __name__ == "__main__":
    sys.exit(main())
