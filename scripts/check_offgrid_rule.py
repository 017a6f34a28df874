"""Checks the off-grid rule for cuBLASLt configurations on this GPU and, with --apply, enables it in the table when it
is safe: a problem the table does not list takes the configuration of the tuned M nearest its M (log scale) with the
same (layout, dtype, N, K) (csrc/dispatch.cpp, `nearest_m_cublaslt`).

Off-grid sample: the LLM projections' (N, K) and some G1000 (N, K) with M values off both grids. For each problem,
timed by CUDA-graph replay (PDL off): cuBLASLt's heuristic choice, the rule's choice (the heuristic where the rule's
configuration cannot run the problem, as the dispatcher does), and autotuning the problem itself. The rule is safe when
it is no slower than the heuristic on geomean and at most 5% of the problems lose more than 3% against the heuristic.

    python scripts/check_offgrid_rule.py --table kernels/sm90/nvidia_h100_80gb_hbm3.json --out OUT/offgrid.json --apply
"""
from __future__ import annotations

import argparse
import bisect
import json
import math
import random
import statistics
import sys
from pathlib import Path

import torch

from cudal2_ops import tables, tune
from cudal2_ops._extension import _C
from cudal2_testing.measure import env, shapes

OFF_GRID_M = (3, 24, 48, 100, 200, 384, 768, 1000, 3000, 6000, 12000)
LOSS = 0.97            # a problem where the rule is below this fraction of the heuristic's speed is a loss
MAX_LOSS_SHARE = 0.05


def nearest_m(tuned: list[int], m: int) -> int:
    """The tuned M nearest `m` on a log scale, a tie going to the larger (the dispatcher's rule)."""
    i = bisect.bisect_left(tuned, m)
    if i == len(tuned):
        return tuned[-1]
    if i == 0:
        return tuned[0]
    above, below = tuned[i], tuned[i - 1]
    return above if above / m <= m / below else below


def sample(per_combo: int, seed: int) -> list[tuple[int, int, int]]:
    """Off-grid (M, N, K): the LLM (N, K) pairs and G1000 (N, K) pairs, each with M values off both grids."""
    rng = random.Random(seed)
    llm_nk = sorted({(n, k) for _, n, k in shapes.llm()})
    g_nk = sorted({(n, k) for _, n, k in shapes.g1000()})
    pool = [(m, n, k) for n, k in llm_nk + rng.sample(g_nk, 20) for m in OFF_GRID_M]
    return rng.sample(pool, min(per_combo, len(pool)))


def tuned_ms(table_entries: dict) -> dict[tuple, list[int]]:
    """{(layout, dtype, N, K): sorted M values} of the entries that hold a cuBLASLt configuration."""
    families: dict[tuple, list[int]] = {}
    for key, entry in table_entries.items():
        if entry.get("cublaslt"):
            layout, dtype, m, n, k = tables.parse_key(key)
            families.setdefault((layout, dtype, n, k), []).append(m)
    return {family: sorted(ms) for family, ms in families.items()}


def check(problem: tune.Problem, table_entries: dict, families: dict[tuple, list[int]]) -> dict | None:
    """Heuristic, rule and autotune times (us) of one off-grid problem, or None when cuBLASLt cannot run it."""
    run = tune.ProblemRun.make(problem)
    configs = _C.tuning.lt_candidates(run.a, run.b, run.out, problem.layout)
    timed = tune.time_configs(configs, run.run_config)
    if not timed:
        return None
    heuristic = next((t.us for t in timed if t.config == configs[0]), None)
    best = tune.fastest(timed, lambda c: run.run_config(c.config))[0].us
    family = families.get((problem.layout, problem.dtype, problem.n, problem.k))
    row = {"problem": problem.key, "heuristic_us": heuristic, "autotune_us": best, "rule_m": None}
    if not family or heuristic is None:
        return {**row, "rule_us": heuristic, "rule": "no tuned M for this (N, K): heuristic"}
    m = nearest_m(family, problem.m)
    config = tables.cublaslt_fields(table_entries[tune.Problem(problem.layout, problem.dtype, m, problem.n,
                                                                problem.k).key])
    try:
        rule_us = tune.graph_time_us(lambda: run.run_config(config), target_us=1000.0, replays=7)
        how = "nearest tuned M's configuration"
    except RuntimeError:
        rule_us, how = heuristic, "nearest tuned M's configuration cannot run it: heuristic"
    return {**row, "rule_m": m, "rule_us": rule_us, "rule": how}


def verdict(rows: list[dict]) -> dict:
    """Aggregates: geomean of heuristic/rule and autotune/rule, the share of losses, and whether the rule is safe."""
    ratios = [r["heuristic_us"] / r["rule_us"] for r in rows]
    vs_tuned = [r["autotune_us"] / r["rule_us"] for r in rows]
    losses = sum(x < LOSS for x in ratios)
    geo = math.exp(statistics.fmean(math.log(x) for x in ratios))
    return {"problems": len(rows), "rule_vs_heuristic_geomean": round(geo, 4), "losses_vs_heuristic": losses,
            "rule_vs_autotune_geomean": round(math.exp(statistics.fmean(math.log(x) for x in vs_tuned)), 4),
            "rule_vs_autotune_min": round(min(vs_tuned), 4),
            "heuristic_vs_autotune_geomean": round(math.exp(statistics.fmean(
                math.log(r["autotune_us"] / r["heuristic_us"]) for r in rows)), 4),
            "safe": geo >= 1.0 and losses <= MAX_LOSS_SHARE * len(rows)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 scripts/check_offgrid_rule.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--table", type=Path, required=True)
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--layouts", default="nn,nt")
    parser.add_argument("--dtypes", default="fp16,bf16")
    parser.add_argument("--per-combo", type=int, default=60, help="off-grid problems per (layout, dtype)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--apply", action="store_true", help="write the verdict into the table's rules")
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        print("check_offgrid_rule: needs a CUDA GPU", file=sys.stderr)
        return 2
    tune.disable_pdl()
    table = json.loads(args.table.read_text())
    families = tuned_ms(table["entries"])
    rows = []
    for dtype in args.dtypes.split(","):
        for layout in args.layouts.split(","):
            for m, n, k in sample(args.per_combo, args.seed):
                row = check(tune.Problem(layout, dtype, m, n, k), table["entries"], families)
                if row is not None and row["heuristic_us"] is not None:
                    rows.append(row)
    result = verdict(rows)
    print(json.dumps(result))
    args.out.write_text(json.dumps({"environment": dict(env.header(sys.argv[1:]), command=" ".join(["python", *sys.argv])), "verdict": result, "rows": rows}, indent=1)
                        + "\n")
    if args.apply:
        table["header"].setdefault("rules", {})["nearest_m_cublaslt"] = bool(result["safe"])
        table["header"]["rules_evidence"] = {"nearest_m_cublaslt": str(args.out.name)}
        args.table.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
