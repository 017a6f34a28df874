"""Checks the off-grid rule for cuBLASLt configurations on this GPU per class of M and, with --apply, enables it in
the table for exactly the classes where it is safe: a problem the table does not list takes the configuration of the
tuned M nearest its M (log scale) with the same (layout, dtype, N, K) (csrc/dispatch.cpp; the header's
`rules.nearest_m_cublaslt`: "off", "unaligned_m", "aligned_m" or "all", cudal2_ops.tables.LT_RULE_SCOPES).

Why per class (cudal2_ops.tables.m_class: M % 8 == 0 or not): cuBLASLt's heuristic choice for unaligned M is far from
autotuning where the nearest tuned M's configuration is close to it, while for aligned M the heuristic's choice often
beats the neighbour's (docs/DECISIONS.md; `--reevaluate` splits an earlier results file this way).

Off-grid sample, per (layout, dtype) and class: the LLM projections' (N, K) and 20 G1000 (N, K), each with M values off
both grids (OFF_GRID_M), problems the table lists left out. Each problem, timed by CUDA-graph replay (PDL off):
autotuning it (every heuristic candidate timed, the fastest and the heuristic's choice re-timed, `tune.fastest`), then
the heuristic's choice and the rule's choice re-timed together in interleaved rounds (the heuristic's choice where the
rule's configuration cannot run the problem, as the dispatcher does). A class is safe when the rule is no slower than
the heuristic on geomean and at most 5% of its problems lose more than 3% against the heuristic. The rule is enabled
only from a table with an entry for every grid problem of the layouts and dtypes checked (`grid_coverage`).

Runtime: the tuner times the LLM grid (345 problems of 315 GFLOP on average) at about 0.1 s per problem on an H100
(tune_grid_llm_2026-11-25.json.gz, one re-timing round); this check re-times in 3 rounds plus the rule's pair, about
twice the timing per problem, on problems of 150 GFLOP on average: about 0.15 s each, so the default 4 (layout,
dtype) x 2 classes x 30 = 240 problems take about 40 s. No problem starts after --budget-s (120 s); the sample is
visited round-robin over (layout, dtype, class), so a cut run stays balanced. The results file records the seconds.

    python scripts/check_offgrid_rule.py --table kernels/sm90/nvidia_h100_80gb_hbm3.json --out OUT/offgrid.json --apply
    python scripts/check_offgrid_rule.py --reevaluate benchmarks/results/nvidia_h100_80gb_hbm3/offgrid_rule_2026-11-25.json
"""
from __future__ import annotations

import argparse
import bisect
import itertools
import json
import math
import random
import statistics
import sys
import time
from pathlib import Path

import torch

from cudal2_ops import tables, tune
from cudal2_ops._extension import _C
from cudal2_testing.measure import env, shapes

OFF_GRID_M = {"aligned_m": (24, 48, 200, 384, 768, 1000, 3000, 6000, 12000),
              "unaligned_m": (3, 5, 7, 13, 37, 100, 333, 1001, 3001)}
G1000_NK = 20          # G1000 (N, K) pairs sampled beside the LLM ones
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


def sample(per_class: int, seed: int) -> dict[str, list[tuple[int, int, int]]]:
    """Off-grid (M, N, K) per M class: the LLM (N, K) pairs and G1000 (N, K) pairs, each with that class's M values."""
    rng = random.Random(seed)
    nks = sorted({(n, k) for _, n, k in shapes.llm()}) + rng.sample(sorted({(n, k) for _, n, k in shapes.g1000()}),
                                                                     G1000_NK)
    pools = {cls: [(m, n, k) for n, k in nks for m in ms] for cls, ms in OFF_GRID_M.items()}
    return {cls: rng.sample(pool, min(per_class, len(pool))) for cls, pool in pools.items()}


def round_robin(groups: list[list]) -> list:
    """The groups' items taken one from each group in turn (a run cut short keeps the groups balanced)."""
    return [item for batch in itertools.zip_longest(*groups) for item in batch if item is not None]


def tuned_configs(table: tables.Table) -> dict[tuple, dict[int, list[int]]]:
    """{(layout, dtype, N, K): {M: cuBLASLt configuration}} of the configurations the dispatcher installs
    (`tables.table_rows`: a configuration slower than the heuristic's choice is not)."""
    families: dict[tuple, dict[int, list[int]]] = {}
    for layout, dtype, m, n, k, *_, config, _near_ties in tables.table_rows(table):
        if config:
            families.setdefault((layout, dtype, n, k), {})[m] = config
    return families


def check(problem: tune.Problem, families: dict[tuple, dict[int, list[int]]]) -> dict | None:
    """Autotune, heuristic and rule times (us) of one off-grid problem, or None when cuBLASLt's heuristic choice
    cannot run it."""
    run = tune.ProblemRun.make(problem)

    def run_timed(candidate: tune.Timed) -> None:
        run.run_config(candidate.config)

    configs = _C.tuning.lt_candidates(run.a, run.b, run.out, problem.layout)
    timed = tune.time_configs(configs, run.run_config)
    heuristic = next((t for t in timed if t.config == configs[0]), None)
    if heuristic is None:
        return None
    row = {"problem": problem.key, "autotune_us": tune.fastest(timed, run_timed, always=heuristic)[0].us}
    family = families.get((problem.layout, problem.dtype, problem.n, problem.k))
    if not family:
        return {**row, "heuristic_us": heuristic.us, "rule_m": None, "rule_us": heuristic.us,
                "rule": "no tuned M for this (N, K): heuristic"}
    m = nearest_m(sorted(family), problem.m)
    row["rule_m"] = m
    if family[m] == heuristic.config:
        return {**row, "heuristic_us": heuristic.us, "rule_us": heuristic.us,
                "rule": "nearest tuned M's configuration is the heuristic's choice"}
    try:
        rule = tune.Timed(tune.graph_time_us(lambda: run.run_config(family[m])), config=family[m])
    except RuntimeError:
        return {**row, "heuristic_us": heuristic.us, "rule_us": heuristic.us,
                "rule": "nearest tuned M's configuration cannot run it: heuristic"}
    pair = [tune.Timed(heuristic.us, config=heuristic.config), rule]
    tune.fastest(pair, run_timed, retime=len(pair))  # both re-timed in interleaved rounds
    return {**row, "heuristic_us": pair[0].us, "rule_us": pair[1].us, "rule": "nearest tuned M's configuration"}


def grid_coverage(table: tables.Table, layouts: list[str], dtypes: list[str]) -> dict:
    """How many of the reference grid's problems (G1000 and LLM, in these layouts and dtypes) the table has an entry
    for. A verdict measured on a partly tuned table judges neighbours the finished one would not offer (the H200's
    first check ran with only the problems up to 2^30 tuned: off-grid M = 3000 found a tuned M of 4)."""
    grid = set(shapes.g1000()) | set(shapes.llm())
    keys = [tables.entry_key(layout, dtype, m, n, k) for layout in layouts for dtype in dtypes for m, n, k in grid]
    present = sum(key in table.entries for key in keys)
    return {"grid_problems": len(keys), "in_table": present, "complete": present == len(keys)}


def geomean(values: list[float]) -> float:
    """Geometric mean, rounded to 4 places."""
    return round(math.exp(statistics.fmean(math.log(x) for x in values)), 4)


def verdict(rows: list[dict]) -> dict:
    """Aggregates: geomean of heuristic/rule and autotune/rule, the losses, and whether the rule is safe."""
    if not rows:
        return {"problems": 0, "safe": False}
    ratios = [r["heuristic_us"] / r["rule_us"] for r in rows]
    vs_tuned = [r["autotune_us"] / r["rule_us"] for r in rows]
    losses = sum(x < LOSS for x in ratios)
    geo = geomean(ratios)
    return {"problems": len(rows), "rule_vs_heuristic_geomean": geo, "losses_vs_heuristic": losses,
            "rule_vs_autotune_geomean": geomean(vs_tuned), "rule_vs_autotune_min": round(min(vs_tuned), 4),
            "heuristic_vs_autotune_geomean": geomean([r["autotune_us"] / r["heuristic_us"] for r in rows]),
            "safe": geo >= 1.0 and losses <= MAX_LOSS_SHARE * len(rows)}


def class_verdicts(rows: list[dict]) -> dict[str, dict]:
    """`verdict` of each M class (tables.M_CLASSES) over the rows the rule covers (a tuned M for the problem's
    (layout, dtype, N, K)), and of all of them ("all", for reference)."""
    covered = [r for r in rows if r["rule_m"] is not None]
    by_class = {cls: verdict([r for r in covered if tables.m_class(tables.parse_key(r["problem"])[2]) == cls])
                for cls in tables.M_CLASSES}
    return {**by_class, "all": verdict(covered)}


def safe_scope(verdicts: dict[str, dict]) -> str:
    """The rules.nearest_m_cublaslt scope that enables the rule for exactly the classes measured safe."""
    return tables.lt_rule_scope([cls for cls in tables.M_CLASSES if verdicts[cls]["safe"]])


def measure(table: tables.Table, per_class: int, seed: int, layouts: list[str], dtypes: list[str],
            budget_s: float) -> tuple[list[dict], int, float]:
    """The rows of the off-grid sample's problems (round-robin over (layout, dtype, class)) measured within
    `budget_s`, how many were not started, and the seconds taken."""
    families = tuned_configs(table)
    problems = sample(per_class, seed)
    groups = [[p for m, n, k in problems[cls] if (p := tune.Problem(layout, dtype, m, n, k)).key not in table.entries]
              for dtype in dtypes for layout in layouts for cls in tables.M_CLASSES]
    order = round_robin(groups)
    start = time.perf_counter()
    rows = []
    for i, problem in enumerate(order):
        if time.perf_counter() - start > budget_s:
            return rows, len(order) - i, time.perf_counter() - start
        row = check(problem, families)
        if row is not None:
            rows.append(row)
    return rows, 0, time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 scripts/check_offgrid_rule.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--table", type=Path)
    parser.add_argument("--out", type=Path)
    parser.add_argument("--layouts", default="nn,nt")
    parser.add_argument("--dtypes", default="fp16,bf16")
    parser.add_argument("--per-class", type=int, default=30, help="off-grid problems per (layout, dtype, M class)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget-s", type=float, default=120.0, help="no problem is started after this many seconds")
    parser.add_argument("--apply", action="store_true", help="write the per-class verdict into the table's rules")
    parser.add_argument("--reevaluate", type=Path, metavar="RESULTS",
                        help="print the per-class verdicts of an earlier results file's rows (no GPU) and exit")
    args = parser.parse_args(argv)
    if args.reevaluate:
        verdicts = class_verdicts(json.loads(args.reevaluate.read_text())["rows"])
        print(json.dumps({"verdicts": verdicts, "scope": safe_scope(verdicts)}, indent=1))
        return 0
    if args.table is None or args.out is None:
        parser.error("--table and --out are needed (or --reevaluate RESULTS)")
    if not torch.cuda.is_available():
        print("check_offgrid_rule: needs a CUDA GPU", file=sys.stderr)
        return 2
    tune.disable_pdl()
    table = tables.read_table(args.table)
    coverage = grid_coverage(table, args.layouts.split(","), args.dtypes.split(","))
    if not coverage["complete"]:
        print(f"check_offgrid_rule: the table has {coverage['in_table']} of the grid's {coverage['grid_problems']} "
              "problems: the verdict judges neighbours a finished table would not offer, and --apply will only turn "
              "the rule off", file=sys.stderr)
    rows, skipped, seconds = measure(table, args.per_class, args.seed, args.layouts.split(","),
                                     args.dtypes.split(","), args.budget_s)
    verdicts = class_verdicts(rows)
    scope = safe_scope(verdicts) if coverage["complete"] else "off"
    print(json.dumps({"verdicts": verdicts, "scope": scope, "seconds": round(seconds, 1), "skipped": skipped}))
    args.out.write_text(json.dumps({
        "environment": dict(env.header(sys.argv[1:]), command=" ".join(["python", *sys.argv])),
        "sample": {"off_grid_m": OFF_GRID_M, "per_class": args.per_class, "seed": args.seed,
                   "m_alignment": tables.M_ALIGNMENT},
        "seconds": round(seconds, 1), "seconds_per_problem": round(seconds / max(len(rows), 1), 3),
        "skipped": skipped, "table_coverage": coverage, "verdicts": verdicts, "scope": scope, "rows": rows},
        indent=1) + "\n")
    if args.apply:
        data = json.loads(args.table.read_text())
        data["header"].setdefault("rules", {})["nearest_m_cublaslt"] = scope
        data["header"].setdefault("rules_evidence", {})["nearest_m_cublaslt"] = str(args.out.name)
        args.table.write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
