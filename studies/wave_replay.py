"""`python -m studies.wave_replay`: a table's search budget (a few evaluations per problem over hundreds of problems)
spent in whole rounds or in waves of problems (`RunArgs.wave`), scored by real measured times (a committed sweep file
replayed, `search.backends.replay`, as `studies.budget_replay` does, with its limits: candidates outside the sweep's
measured pool are re-drawn, so only the pool's kernels can be found).

Every problem of the sweep's fp16 NT set below 2^`--max-log2-mnk` is searched by the rl policy warm-started from other
GPUs' sweeps (leave-one-GPU-out), `--per-problem` evaluations each, with `--per-round` proposals per problem and round,
once proposing a whole round before evaluating it and once in waves of `--wave` problems. Reported per seed: the
geomean best speedup over cuBLASLt-autotune and the problems where a candidate under the bar was found (what a
searched table takes to the tuner).

    python -m studies.wave_replay --sweep benchmarks/results/nvidia_h100_80gb_hbm3/sweep_2026-11-25_a3fd6a0.json.gz \\
        --warm-from benchmarks/results/nvidia_h200/sweep_2026-11-23_cc51879.json.gz \\
        --out benchmarks/results/nvidia_h100_80gb_hbm3/wave_replay_<date>_<commit>.json

`--add-store STORE ...` widens the scored sweep's pools with a search store's verdicts on the same GPU model
(`ReplayBackend`), e.g. to replay what a search measured that no sweep did.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from cudal2_testing.measure.summary import geomean, markdown_table
from search import warm_start
from search.backends.replay import ReplayBackend
from search.loop import RunArgs, Search
from search.store import Store
from studies.budget_replay import MISSING, check_leave_one_gpu_out, warm_policy
from studies.report_files import write_report


def replay_table_search(backend: ReplayBackend, problems: list, warm: list, seed: int, per_problem: int,
                        per_round: int, wave: int | None) -> dict:
    """One warm-started rl search over `problems` at `per_problem` replayed evaluations each: its geomean best speedup
    and how many problems it found a candidate under the bar for."""
    store = Store(":memory:")
    args = RunArgs(policy="rl", arch=backend.arch, budget_evals=per_problem * len(problems), seed=seed, max_builds=0,
                   backend="replay", per_round=per_round, wave=wave)
    search = Search.start(store, backend, args, problems, policy=warm_policy(backend.arch, seed, warm))
    search.run()
    best: dict[str, float] = {}
    for row in store.evaluations(search.run_id):
        if row["us"] and row["baseline_us"] and row["status"] == "ok":
            best[row["problem_key"]] = max(best.get(row["problem_key"], 0.0), row["baseline_us"] / row["us"])
    return {"geomean_best": geomean([best.get(p.key, MISSING) for p in problems]),
            "found_under_bar": sum(value > 1.0 for value in best.values()), "measured": len(best)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.wave_replay", description=__doc__.split("\n\n")[0])
    parser.add_argument("--sweep", type=Path, required=True, help="the sweep file whose measurements score the runs")
    parser.add_argument("--warm-from", type=Path, nargs="+", required=True, help="sweep files of other GPUs")
    parser.add_argument("--add-store", type=Path, nargs="*", default=[],
                        help="search stores of the scored sweep's GPU model whose verdicts widen its pools")
    parser.add_argument("--out", type=Path, required=True, help="JSON results (.json); .md beside it")
    parser.add_argument("--max-log2-mnk", type=int, default=32)
    parser.add_argument("--per-problem", type=int, default=4, help="evaluations per problem (the budget)")
    parser.add_argument("--per-round", type=lambda t: [int(x) for x in t.split(",")], default=[4, 2])
    parser.add_argument("--wave", type=int, default=32)
    parser.add_argument("--seeds", type=int, default=3)
    args = parser.parse_args(argv)
    began = time.monotonic()
    backend = ReplayBackend(args.sweep, tuple(args.add_store))
    env = backend.environment()
    check_leave_one_gpu_out(env, args.warm_from, args.sweep)
    warm = warm_start.load(args.warm_from)
    problems = [p for p in backend.measured_problems("nt", "fp16") if p.m * p.n * p.k < 2 ** args.max_log2_mnk]
    runs = []
    for seed in range(args.seeds):
        for per_round in args.per_round:
            for wave in (None, args.wave):
                runs.append({"seed": seed, "per_round": per_round, "wave": wave,
                             **replay_table_search(backend, problems, warm, seed, args.per_problem, per_round, wave)})
                print(json.dumps(runs[-1]), flush=True)
    from cudal2_testing.measure.env import git_commit  # noqa: PLC0415 (imports torch: only for the header)
    command = "python -m studies.wave_replay " + " ".join(argv if argv is not None else sys.argv[1:])
    doc = {"header": {"study": "studies/wave_replay.py", "commit": git_commit(), "command": command,
                      "scored": str(args.sweep), "gpu": env["gpu_name"], "environment": env,
                      "warm_from": [str(p) for p in args.warm_from], "added_stores": [str(p) for p in args.add_store],
                      "problems": len(problems),
                      "wall_s": round(time.monotonic() - began, 1)},
           "runs": runs}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    write_report(args.out.with_suffix(".md"), render(doc).splitlines() + [""], doc)
    return 0


def render(doc: dict) -> str:
    """The Markdown page of a results document: one row per setting, the seeds side by side."""
    header = doc["header"]
    settings = sorted({(r["per_round"], r["wave"] or 0) for r in doc["runs"]}, key=lambda s: (-s[0], s[1]))
    rows = []
    for per_round, wave in settings:
        runs = sorted((r for r in doc["runs"] if (r["per_round"], r["wave"] or 0) == (per_round, wave)),
                      key=lambda r: r["seed"])
        rows.append([str(per_round), f"waves of {wave}" if wave else "whole round",
                     " / ".join(f"{r['geomean_best']:.3f}" for r in runs),
                     " / ".join(str(r["found_under_bar"]) for r in runs)])
    lines = [f"# A table's search budget in whole rounds or in waves, scored by measured times ({header['gpu']})", "",
             f"- Scored by `{header['scored']}` (each row's cuBLASLt-autotune time the bar); warm start from "
             f"{', '.join(f'`{p}`' for p in header['warm_from'])}; {header['problems']} fp16 NT problems; "
             "candidates outside the sweep's measured pool re-drawn (studies/budget_replay.py says what this cannot "
             "show)" + ("; pools widened by the verdicts of " + ", ".join(f"`{p}`" for p in header["added_stores"])
                        if header.get("added_stores") else ""),
             f"- Commit {header['commit']}; command: `{header['command']}`; {header['wall_s']} s on this machine", ""]
    lines += markdown_table(["proposals per problem and round", "order", "geomean best speedup (seeds)",
                             "problems with a candidate under the bar (seeds)"], rows)
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
