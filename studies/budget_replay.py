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
        --warm-from benchmarks/results/nvidia_h200/sweep_2026-11-23_cc51879.json \\
        --out benchmarks/results/nvidia_h100_80gb_hbm3/budget_replay_2026-11-25.json
"""
from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
from pathlib import Path

from cudal2_testing.measure import shapes
from cudal2_testing.measure.summary import geomean, markdown_table
from search import warm_start
from search.backends.replay import ReplayBackend
from search.candidate import Problem
from search.errors import UserError
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


def evals_to_reach(target: float, values: list[float], start: int = RunArgs.per_round) -> int | None:
    """The first budget b >= `start` (values[b - 1]) that reaches `target` (None if none does). Below one round's
    proposals per problem (`start`) only part of the problems have been evaluated at all."""
    return next((b for b in range(start, len(values) + 1) if values[b - 1] >= target - 1e-12), None)


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


def summary_rows(curves: dict, budgets: list[int]) -> list[list[str]]:
    """Markdown rows: set, proposer, mean geomean (per seed) at each budget."""
    rows = []
    for name, by_proposer in curves.items():
        for proposer, per_seed in by_proposer.items():
            rows.append([name, proposer] + [
                f"{statistics.mean(c[b - 1] for c in per_seed):.4f} "
                f"({', '.join(f'{c[b - 1]:.4f}' for c in per_seed)})" for b in budgets])
    return rows


def reach_rows(curves: dict, budgets: list[int], target: str = "random") -> list[list[str]]:
    """Markdown rows: per set and rl variant, the evaluations per problem its mean curve (over seeds) needs to reach
    `target`'s mean geomean at each budget b (from one round, `evals_to_reach`)."""
    rows = []
    for name, by_proposer in curves.items():
        mean = {p: [statistics.mean(v) for v in zip(*per_seed)] for p, per_seed in by_proposer.items()}
        final = len(mean[target])
        for proposer in (p for p in PROPOSERS if p.startswith("rl")):
            reached = [evals_to_reach(mean[target][b - 1], mean[proposer]) for b in budgets]
            rows.append([name, proposer] + [str(r) if r else f"> {final}" for r in reached])
    return rows


def target_rows(curves: dict, near: float = 0.99, share: float = 1 / 3) -> list[list[str]]:
    """Markdown rows of the issue's target: per set and rl variant, random search's final geomean (mean curve over
    seeds, at the largest budget N), the evaluations per problem the variant's mean curve needs to reach it and
    whether that is within `share` of N, then the evaluations it and random need to reach `near` of it."""
    rows = []
    for name, by_proposer in curves.items():
        mean = {p: [statistics.mean(v) for v in zip(*per_seed)] for p, per_seed in by_proposer.items()}
        final = len(mean["random"])
        goal = mean["random"][-1]
        random_near = evals_to_reach(near * goal, mean["random"])
        for proposer in (p for p in PROPOSERS if p.startswith("rl")):
            reached = evals_to_reach(goal, mean[proposer])
            met = reached is not None and reached <= final * share
            rows.append([name, proposer, f"{goal:.4f}", f"{reached} of {final}" if reached else f"> {final}",
                         f"{'yes' if met else 'no'} (<= {math.floor(final * share)})",
                         str(evals_to_reach(near * goal, mean[proposer]) or f"> {final}"),
                         str(random_near or f"> {final}")])
    return rows


def target_table(curves: dict) -> list[str]:
    """The Markdown lines of `target_rows`' table."""
    final = len(next(iter(curves.values()))["random"][0])
    return markdown_table(["set", "policy", f"random at {final}", "policy reaches it at", "within a third",
                           "policy to 99%", "random to 99%"], target_rows(curves))


def plot(curves: dict, path: Path, title: str) -> None:
    """One panel per problem set: mean curve over seeds of each proposer from one round on, min-max band."""
    import matplotlib  # noqa: PLC0415 (only for the figure)
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415
    fig, axes = plt.subplots(1, len(curves), figsize=(6 * len(curves), 4.5), squeeze=False)
    for ax, (name, by_proposer) in zip(axes[0], curves.items()):
        first = RunArgs.per_round   # below one round only part of the problems were evaluated
        for proposer, per_seed in by_proposer.items():
            xs = range(first, len(per_seed[0]) + 1)
            values = list(zip(*per_seed))[first - 1:]
            ax.plot(xs, [statistics.mean(v) for v in values], label=proposer)
            ax.fill_between(xs, [min(v) for v in values], [max(v) for v in values], alpha=0.15)
        ax.set_title(name)
        ax.set_xlabel("evaluations per problem")
        ax.set_ylabel("geomean best speedup vs cuBLASLt-autotune")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


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
    try:
        raise SystemExit(main())
    except UserError as err:
        print(f"error: {err}", file=sys.stderr)
        raise SystemExit(2) from None
