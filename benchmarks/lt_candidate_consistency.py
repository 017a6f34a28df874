"""Do the tuner and the benchmark's cuBLASLt-autotune time the same candidates alike? For given problems, every
cuBLASLt heuristic candidate timed by CUDA-graph replay (PDL off) two ways, interleaved over rounds: through the
dispatcher's instance as `cudal2_ops.tune` times it, and through the baseline instance as the benchmark's
cuBLASLt-autotune times it; with the eager single-call time that sizes each replay. Then each way's selection (the
tuner's `tune_problem`, the baseline's `AutotunedLt.select`) is made and both picks are re-timed the same way; and
cuBLASLt's heuristic choice is timed as the dispatcher runs it (the returned algorithm struct), rebuilt from its
configuration fields (as the tuner, the off-grid check and the tables run configurations) and beside torch.

The default problems are those where the H100 tuning of b1c4805 timed the heuristic's choice at 110-130 us for a
2.7-7.6 us problem (`tune_grid_below2e30_2026-11-25_b1c4805.json.gz`) and NN bf16 128x128x8192, where its pick ran
7.57 us against the benchmark's 6.48 us.

    python -m benchmarks.lt_candidate_consistency --out OUT/lt_candidate_consistency.json
"""
from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from pathlib import Path

import torch

from cudal2_testing.measure import env

DEFAULT_KEYS = ("nt_bf16_1024_128_256", "nn_bf16_2048_512_512", "nn_bf16_12288_128_256", "nt_bf16_64_64_8192",
                "nn_bf16_128_128_8192",
                # off the grid, where scripts/check_offgrid_rule.py timed the heuristic's configuration 4-6x slower than
                # autotuning (offgrid_rule_2026-11-25.json)
                "nt_bf16_200_128_256", "nn_fp16_100_512_256", "nt_fp16_768_512_256")
SLOWER = 1.5  # a candidate timed this much slower one way than the other is listed as inconsistent


def candidate_rows(problem, run, rounds: int) -> list[dict]:
    """Every candidate of `problem`, timed both ways in `rounds` interleaved rounds (median per way)."""
    from cudal2_ops import tune
    from cudal2_ops._extension import _C

    configs = _C.tuning.lt_candidates(run.a, run.b, run.out, problem.layout)
    baseline_configs = {tuple(c) for c in _C.testing.cublaslt_candidates(run.a, run.b, run.out, problem.layout)}
    ways = {"dispatcher": lambda c: run.run_config(c),
            "baseline": lambda c: _C.testing.cublaslt_run_config(run.a, run.b, None, run.out, problem.layout, c)}
    rows = []
    for index, config in enumerate(configs):
        row = {"problem": problem.key, "index": index, "config": list(config),
               "in_baseline_list": tuple(config) in baseline_configs}
        try:
            for name, way in ways.items():
                row[f"{name}_eager_us"] = round(tune.eager_call_us(lambda: way(config)), 3)
            times = {name: [] for name in ways}
            for _ in range(rounds):
                for name, way in ways.items():
                    times[name].append(tune.graph_time_us(lambda: way(config)))
            row.update({f"{name}_us": round(statistics.median(t), 3) for name, t in times.items()})
        except RuntimeError as err:
            row["error"] = str(err)[:200]
        rows.append(row)
    return rows


def heuristic_ways(problem, run) -> dict:
    """cuBLASLt's heuristic choice run as the dispatcher runs it (the algorithm struct the heuristic returned, on the
    baseline instance) beside the same choice rebuilt from its configuration fields (as the tuner and the tables run
    configurations), and torch's own call: whether a rebuilt configuration is the algorithm it was read from."""
    import torch.nn.functional as F

    from cudal2_ops import tune
    from cudal2_ops._extension import _C

    first = _C.testing.cublaslt_candidates(run.a, run.b, run.out, problem.layout)[0]
    ways = {"heuristic_struct": lambda: _C.testing.cublaslt_matmul(run.a, run.b, None, run.out, problem.layout,
                                                                    "heuristic"),
            "heuristic_rebuilt": lambda: _C.testing.cublaslt_run_config(run.a, run.b, None, run.out, problem.layout,
                                                                         first),
            "torch": (lambda: torch.matmul(run.a, run.b)) if problem.layout == "nn" else (lambda: F.linear(run.a, run.b))}
    return {f"{name}_us": round(tune.graph_time_us(way), 3) for name, way in ways.items()} | {
        "heuristic_config": list(first)}


def picks(problem, run) -> dict:
    """The tuner's and the baseline autotune's selection for `problem`, each pick re-timed on both instances."""
    from cudal2_ops import tables, tune
    from cudal2_ops._extension import _C
    from cudal2_testing import lt_baseline

    entry = tune.tune_problem(problem, [], tune.DEFAULT_MARGIN)
    tuner_pick = [entry["cublaslt"][f] for f in tables.LT_CONFIG_FIELDS] if entry else None
    baseline_pick = lt_baseline.AutotunedLt(problem.layout).select(run.a, run.b, run.out)
    entry = entry or {}  # no runnable cuBLASLt configuration: the tuner has no pick
    out = {"tuner_pick": tuner_pick, "tuner_pick_us_by_tuner": entry.get("cublaslt_us"),
           "tuner_heuristic_us": entry.get("cublaslt_heuristic_us"), "baseline_pick": list(baseline_pick)}
    for name, config in (("tuner_pick", tuner_pick), ("baseline_pick", baseline_pick)):
        if config is not None:
            out[f"{name}_us_dispatcher"] = round(tune.graph_time_us(lambda c=config: run.run_config(c)), 3)
            out[f"{name}_us_baseline"] = round(tune.graph_time_us(
                lambda c=config: _C.testing.cublaslt_run_config(run.a, run.b, None, run.out, problem.layout, c)), 3)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.lt_candidate_consistency", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--keys", default=",".join(DEFAULT_KEYS), help="comma-separated table keys of the problems")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("lt_candidate_consistency: needs a CUDA GPU", file=sys.stderr)
        return 2
    from cudal2_ops import tables, tune

    tune.disable_pdl()
    started = time.perf_counter()
    rows, selections = [], {}
    for key in args.keys.split(","):
        problem = tune.Problem(*tables.parse_key(key))
        run = tune.ProblemRun.make(problem)
        rows += candidate_rows(problem, run, args.rounds)
        selections[key] = {**picks(problem, run), **heuristic_ways(problem, run)}
    timed = [r for r in rows if "dispatcher_us" in r]
    inconsistent = [r for r in timed if max(r["dispatcher_us"], r["baseline_us"])
                    > SLOWER * min(r["dispatcher_us"], r["baseline_us"])]
    summary = {"problems": len(selections), "candidates": len(rows), "timed": len(timed),
               "inconsistent": len(inconsistent), "not_in_baseline_list": sum(not r["in_baseline_list"] for r in rows),
               "slow_either_way": sum(max(r["dispatcher_us"], r["baseline_us"]) > 50 for r in timed),
               "seconds": round(time.perf_counter() - started, 1)}
    args.out.write_text(json.dumps({"environment": dict(env.header(sys.argv[1:]), command=" ".join(
        ["python -m benchmarks.lt_candidate_consistency", *sys.argv[1:]])), "summary": summary,
        "selections": selections, "inconsistent": inconsistent, "rows": rows}, indent=1) + "\n")
    print(json.dumps(summary))
    for key, sel in selections.items():
        print(key, json.dumps({k: v for k, v in sel.items() if not k.endswith("pick")}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
