"""`python -m studies.budget_replay`: the proposers compared at equal evaluation budgets, scored by real measured
times (a committed sweep file replayed, `search.backends.replay`), not by the simulator.

Every evaluation a run makes is answered with the sweep's measurement of that candidate on that problem on that GPU,
against the cuBLASLt-autotune time of the same row. The sweep measured each problem's built kernels at default knobs
and the knob grids of its two fastest (about 35 candidates per problem), so the search is restricted to that pool:
a proposal outside it is re-drawn by its proposer (`ProposalContext.pool`), never evaluated. Re-drawing, rather than
charging an evaluation for a "not measured" proposal, is what makes the comparison one of search: random search
samples the whole space, where nearly every point is unmeasured, so charging would measure how rarely each proposer
leaves the pool rather than how fast it finds the pool's best. What this can show: real hardware timings, and which
proposer finds the best of the measured pool in fewer evaluations. What it cannot: anything outside the pool (new
tile shapes, knob values the sweep did not try, LLM-written sources), so a proposer's edge at exploring beyond the
built kernels, the point of a search, is not measured here; and with ~35 candidates per problem every proposer
reaches the pool's best by ~32 evaluations.

Proposers: sweep (the heuristic that produced the file, hence in-pool by construction), random, rl (cold), rl warm-
started from other GPUs' sweeps (`--warm-from`, leave-one-GPU-out: a file of the scored GPU is refused), and rl warm-
started from the scored file's other problems (held-out problems: none of the scored set's rows is used). Problem
sets: a stratified `--shapes`-problem sample (per seed) of the file's G1000 fp16 NT problems, and the file's LLM
decode shapes (M <= `--decode-max-m`, fp16 NT). One run per (set, proposer, seed) at the largest budget: a run is
deterministic and does not know its budget, so its first b x problems evaluations are the run at b per problem;
the curve is the geomean over the set of the best speedup found after each b (0.01 for a problem with none yet).
The page states the issue's target per set and rl variant (random search's final geomean reached within a third of
its evaluations) and the evaluations to reach 99% of it; `--before` repeats that table for an earlier result.

    python -m studies.budget_replay --sweep benchmarks/results/nvidia_h100_80gb_hbm3/sweep_2026-11-25_a3fd6a0.json.gz \\
        --warm-from benchmarks/results/nvidia_h200/sweep_2026-11-23_cc51879.json.gz \\
        --out benchmarks/results/nvidia_h100_80gb_hbm3/budget_replay_2026-11-25.json
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from cudal2_testing.measure import shapes
from cudal2_testing.measure.summary import geomean, markdown_table
from studies.budget_curves import plot, reach_rows, summary_rows, target_table
from search import warm_start
from search.backends.replay import ReplayBackend
from search.candidate import Problem
from search.errors import UserError, run_command
from search.loop import RunArgs, Search
from search.policy import Policy
from search.store import Store
from search.table_select import read_sweep

PROPOSERS = ("sweep", "random", "rl", "rl+warm (other GPU)", "rl+warm (other problems)")
MISSING = 0.01   # a problem with no measured candidate yet counts as this speedup (as studies.budget_study)


def problem_sets(backend: ReplayBackend, count: int, seed: int, decode_max_m: int) -> dict[str, list[Problem]]:
    """The G1000 sample (fp16 NT, stratified, `count` problems for `seed`) and the LLM decode shapes of the file."""
    measured = backend.measured_problems("nt", "fp16")
    g1000, llm = set(shapes.g1000()), set(shapes.llm())
    in_g1000 = [p for p in measured if (p.m, p.n, p.k) in g1000]
    chosen = set(shapes.stratified_sample([(p.m, p.n, p.k) for p in in_g1000], count, seed))
    return {"g1000": [p for p in in_g1000 if (p.m, p.n, p.k) in chosen],
            "llm_decode": [p for p in measured if (p.m, p.n, p.k) in llm and p.m <= decode_max_m]}


def warm_policy(arch: int, seed: int, measurements: list[warm_start.Measurement]) -> Policy:
    """A policy fit to `measurements` (warm_start.warm_start)."""
    policy = Policy(arch, seed)
    warm_start.warm_start(policy, measurements, seed)
    return policy


def curve(store: Store, run_id: str, problems: list[Problem], per_problem: int) -> list[float]:
    """Geomean over `problems` of the best speedup after b x len(problems) evaluations, b = 1..per_problem."""
    best: dict[str, float] = {}
    out = []
    rows = store.evaluations(run_id)
    for b in range(1, per_problem + 1):
        for row in rows[(b - 1) * len(problems):b * len(problems)]:
            if row["us"] and row["baseline_us"] and row["status"] == "ok":
                best[row["problem_key"]] = max(best.get(row["problem_key"], 0.0), row["baseline_us"] / row["us"])
        out.append(geomean([best.get(p.key, MISSING) for p in problems]))
    return out


def replay_run(backend: ReplayBackend, problems: list[Problem], policy: str, seed: int, per_problem: int,
               fitted: Policy | None = None) -> list[float]:
    """One search over `problems` with `per_problem` x len(problems) replayed evaluations; its budget curve."""
    store = Store(":memory:")
    args = RunArgs(policy=policy, arch=backend.arch, budget_evals=per_problem * len(problems), seed=seed,
                   max_builds=0, backend="replay")
    search = Search.start(store, backend, args, problems, policy=fitted)
    search.run()
    return curve(store, search.run_id, problems, per_problem)


def check_leave_one_gpu_out(scored: dict, warm_paths: list[Path], scored_path: Path) -> None:
    """UserError when a warm-start file is the scored file or was measured on the scored GPU."""
    for path in warm_paths:
        env = read_sweep(path)["environment"]
        if path.resolve() == scored_path.resolve() or env["gpu_name"] == scored["gpu_name"]:
            raise UserError(f"--warm-from {path}: measured on {env['gpu_name']}, the scored GPU (leave-one-GPU-out: "
                            f"give other GPUs' sweeps)")


def study(backend: ReplayBackend, warm_other_gpu: list[warm_start.Measurement], shape_count: int, seeds: int,
          per_problem: int, decode_max_m: int, log=print) -> dict:
    """Curves[set][proposer] = one list of geomeans (b = 1..per_problem) per seed."""
    scored_file = warm_start.from_sweep(read_sweep(backend.path))
    curves: dict[str, dict[str, list[list[float]]]] = {}
    for seed in range(seeds):
        for name, problems in problem_sets(backend, shape_count, seed, decode_max_m).items():
            held_out = {p.key for p in problems}
            other_problems = [m for m in scored_file if m[0].key not in held_out]
            fitted = {"rl+warm (other GPU)": lambda: warm_policy(backend.arch, seed, warm_other_gpu),
                      "rl+warm (other problems)": lambda: warm_policy(backend.arch, seed, other_problems)}
            for proposer in PROPOSERS:
                began = time.monotonic()
                policy = fitted[proposer]() if proposer in fitted else None
                values = replay_run(backend, problems, proposer.split("+")[0], seed, per_problem, policy)
                curves.setdefault(name, {}).setdefault(proposer, []).append(values)
                log(f"seed {seed} {name} ({len(problems)} problems) {proposer}: {values[-1]:.4f} "
                    f"({time.monotonic() - began:.0f} s)")
    return curves


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.budget_replay", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweep", type=Path, help="the sweep file whose measurements score the runs")
    parser.add_argument("--warm-from", type=Path, nargs="+",
                        help="sweep files of other GPUs for the leave-one-GPU-out warm start")
    parser.add_argument("--out", type=Path, required=True, help="JSON results; .md and .png beside it")
    parser.add_argument("--shapes", type=int, default=100, help="G1000 problems per seed")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--budgets", type=lambda t: [int(x) for x in t.split(",")], default=[4, 8, 16, 24, 32],
                        help="evaluations per problem reported in the table (the curves go to the largest)")
    parser.add_argument("--decode-max-m", type=int, default=64)
    parser.add_argument("--before", type=Path,
                        help="an earlier results JSON of this study whose target table the page repeats for comparison")
    parser.add_argument("--render", action="store_true",
                        help="only write the .md and .png again from the --out JSON (no runs)")
    args = parser.parse_args(argv)
    if args.render:
        print(render(json.loads(args.out.read_text()), args.out))
        return 0
    if not args.sweep or not args.warm_from:
        parser.error("--sweep and --warm-from are required (except with --render)")
    began = time.monotonic()
    backend = ReplayBackend(args.sweep)
    env = backend.environment()
    check_leave_one_gpu_out(env, args.warm_from, args.sweep)
    curves = study(backend, warm_start.load(args.warm_from), args.shapes, args.seeds, max(args.budgets),
                   args.decode_max_m)
    from cudal2_testing.measure.env import git_commit  # noqa: PLC0415 (imports torch: only for the header)
    command = "python -m studies.budget_replay " + " ".join(argv if argv is not None else sys.argv[1:])
    header = {"study": "studies/budget_replay.py", "commit": git_commit(), "command": command,
              "scored": str(args.sweep), "gpu": env["gpu_name"], "environment": env,
              "warm_from": [str(p) for p in args.warm_from], "python": sys.version.split()[0],
              "wall_s": round(time.monotonic() - began, 1)}
    settings = {k: [str(p) for p in v] if k == "warm_from" else str(v) if isinstance(v, Path) else v
                for k, v in vars(args).items()}
    doc = {"header": header, "settings": settings, "curves": curves}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(render(doc, args.out))
    return 0


def render(doc: dict, out: Path) -> str:
    """Writes the Markdown page and the PNG of a results document beside `out`; returns the Markdown."""
    header, settings, curves = doc["header"], doc["settings"], doc["curves"]
    env, budgets = header["environment"], settings["budgets"]
    backend = ReplayBackend(Path(header["scored"]))
    sets = problem_sets(backend, settings["shapes"], 0, settings["decode_max_m"])
    png = out.with_suffix(".png")
    seeds = f"seeds 0-{settings['seeds'] - 1}"
    plot(curves, png, f"{env['gpu_name']}: replayed measurements of {Path(header['scored']).name}, {seeds}")
    lines = [f"# Proposers at equal budgets, scored by measured times ({env['gpu_name']})", "",
             f"- Scored by: `{header['scored']}` (GPU {env['gpu_name']}, driver {env.get('driver')}, CUDA "
             f"{env.get('cuda')}, torch {env.get('torch')}, sweep commit {env.get('commit')}; baseline: each row's "
             f"cuBLASLt-autotune time); protocol: {env.get('protocol')}",
             f"- Warm start from other GPUs: {', '.join(f'`{p}`' for p in header['warm_from'])}; from other "
             "problems: the scored file's rows outside the scored set",
             f"- Problems: {len(sets['g1000'])} G1000 fp16 NT (stratified per seed) and {len(sets['llm_decode'])} LLM "
             f"decode shapes (M <= {settings['decode_max_m']}, fp16 NT); {seeds}; candidates outside the sweep's "
             "measured pool are re-drawn (studies/budget_replay.py says why and what this cannot show)",
             f"- Commit {header['commit']}; command: `{header['command']}`; {header['wall_s']} s on this machine", "",
             "Geomean over the set of the best speedup found vs cuBLASLt-autotune; mean over seeds (per seed in "
             f"brackets). Curves: {png.name}.", ""]
    lines += markdown_table(["set", "proposer"] + [f"{b} evals/problem" for b in budgets],
                            summary_rows(curves, budgets))
    final = max(budgets)
    lines += ["", f"The target (issue 26): the policy reaches random search's final geomean (at {final} evaluations "
                  f"per problem) in at most a third of random's evaluations; and the evaluations to reach 99% of it "
                  "(mean curves over seeds, from one round of 4):", ""]
    lines += target_table(curves)
    if settings.get("before"):
        before = json.loads(Path(settings["before"]).read_text())
        lines += ["", f"The same for the earlier results `{settings['before']}` (commit {before['header']['commit']}, "
                      "same scored file and settings unless its header says otherwise):", ""]
        lines += target_table(before["curves"])
    for target in ("random", "sweep"):
        lines += ["", f"Evaluations per problem each policy needs (mean curve over seeds, from one round of 4) to "
                      f"reach the {target} proposer's mean geomean at b evaluations per problem:", ""]
        lines += markdown_table(["set", "policy"] + [f"{target} at {b}" for b in budgets],
                                reach_rows(curves, budgets, target))
    ceiling = {name: geomean([backend.best_speedup(p) for p in problems]) for name, problems in sets.items()}
    lines += ["", "The pool's ceiling (the best measured candidate of every problem, seed 0's sets): " +
              ", ".join(f"{name} {value:.4f}" for name, value in ceiling.items()) + "."]
    text = "\n".join(lines) + "\n"
    out.with_suffix(".md").write_text(text)
    return text

if __name__ == "__main__":
    run_command(main)
