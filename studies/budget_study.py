"""`python -m studies.budget_study`: the proposers compared on the simulated benchmark at several evaluation budgets
per problem (the question a real run's budget answers: how many evaluations per shape does each need?).

For each seed: a stratified G1000 sample (fp16 NT) of `--shapes` problems; the policies sweep, random, rl (cold) and
rl warm-started from a simulated H100 sweep (`--warm-per-problem` evaluations each) of 100 other G1000 shapes; each
run gets `budget x shapes` evaluations on the simulated GPU of `--arch` (90: the H100 itself; 80: an A100, which then
learns from another GPU's measurements of the families it shares); the figure is the geomean over the sample of the
best speedup found (0.01 for a problem left unmeasured). Writes JSON and a Markdown table.

    python -m studies.budget_study --out benchmarks/results/simulated/budget_study.json [--arch 80]
"""
from __future__ import annotations

import argparse
import json
import statistics
import time
from pathlib import Path

from cudal2_testing.measure import shapes
from search import warm_start
from search.candidate import Problem
from cudal2_testing.measure.summary import geomean, markdown_table
from search.loop import RunArgs, Search
from search.policy import Policy
from search.simulate import SimulatedBackend
from search.store import Store

PROPOSERS = ("sweep", "random", "rl", "rl+warm")


def sample(count: int, seed: int) -> list[Problem]:
    """A stratified fp16 NT G1000 sample."""
    return [Problem("nt", "fp16", *s) for s in shapes.stratified_sample(shapes.g1000(), count, seed)]


def simulated_sweep(problems: list[Problem], seed: int, per_problem: int) -> list[warm_start.Measurement]:
    """The measurements of a simulated sweep-heuristic run over `problems`."""
    store = Store(":memory:")
    search = Search.start(store, SimulatedBackend(seed=seed),
                          RunArgs(policy="sweep", budget_evals=per_problem * len(problems), seed=seed), problems)
    search.run()
    return warm_start.measurements_of(store, search.run_id)


def geomean_best(problems: list[Problem], seed: int, policy: str, per_problem: int,
                 warm: list[warm_start.Measurement] | None = None, arch: int = 90) -> float:
    """Geomean best speedup of one simulated run on the simulated GPU of `arch`."""
    fitted = None
    if warm is not None:
        fitted = Policy(arch, seed)
        warm_start.warm_start(fitted, warm, seed)
    store = Store(":memory:")
    search = Search.start(store, SimulatedBackend(seed=seed, arch=arch),
                          RunArgs(policy=policy, arch=arch, budget_evals=per_problem * len(problems), seed=seed),
                          problems, policy=fitted)
    search.run()
    best = search.best_speedups()
    return geomean([best.get(p.key, 0.01) for p in problems])


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.budget_study", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON results; the Markdown goes beside it (.md)")
    parser.add_argument("--shapes", type=int, default=100, help="problems per run")
    parser.add_argument("--budgets", type=lambda t: [int(x) for x in t.split(",")], default=[4, 8, 24],
                        help="evaluations per problem, comma-separated")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--warm-per-problem", type=int, default=30)
    parser.add_argument("--arch", type=int, choices=(90, 80), default=90, help="the simulated GPU the runs use")
    args = parser.parse_args(argv)
    began = time.monotonic()
    scores: dict[str, dict[int, list[float]]] = {p: {b: [] for b in args.budgets} for p in PROPOSERS}
    for seed in range(args.seeds):
        problems = sample(args.shapes, seed)
        others = [p for p in sample(args.shapes + 100, seed + 100) if p not in problems][:100]
        warm = simulated_sweep(others, seed, args.warm_per_problem)
        for budget in args.budgets:
            for proposer in PROPOSERS:
                policy = "rl" if proposer == "rl+warm" else proposer
                scores[proposer][budget].append(
                    geomean_best(problems, seed, policy, budget, warm if proposer == "rl+warm" else None, args.arch))
    gpu = SimulatedBackend(arch=args.arch).environment()["gpu_name"]
    doc = {"settings": vars(args) | {"out": str(args.out)}, "backend": f"{gpu} (search/simulate.py)",
           "scores": {p: {str(b): v for b, v in by.items()} for p, by in scores.items()},
           "wall_s": round(time.monotonic() - began, 1)}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    lines = [f"# Proposers by budget ({gpu}; {args.shapes} G1000 shapes fp16 NT; seeds 0-{args.seeds - 1})", "",
             "Geomean over the sample of the best speedup found vs simulated cuBLASLt-autotune; mean over seeds "
             "(per seed in brackets). rl+warm: fit first to a simulated H100 sweep of 100 other shapes "
             f"({args.warm_per_problem} evaluations each).", ""]
    lines += markdown_table(["proposer"] + [f"{b} evals/problem" for b in args.budgets],
                            [[proposer] + [f"{statistics.mean(v):.3f} ({', '.join(f'{x:.3f}' for x in v)})"
                                           for v in scores[proposer].values()] for proposer in PROPOSERS])
    lines += ["", f"Command: `python -m studies.budget_study --out {args.out} --arch {args.arch}`; {doc['wall_s']} s."]
    args.out.with_suffix(".md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
