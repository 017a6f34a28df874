"""`python -m studies.budget_hardware`: the proposers compared at equal evaluation budgets on this machine's GPUs,
every evaluation judged live by the search's judge (search.eval_worker), not replayed and not simulated.

Sets: a stratified G1000 sample (`--shapes` problems, fp16 NT) and the LLM decode shapes (M <= `--decode-max-m`,
fp16 NT). Proposers: the sweep heuristic, random search, the rl policy cold, and the rl policy warm-started from
other GPUs' sweeps (`--warm-from`; a file measured on this GPU model is left out: leave-one-GPU-out). Each
(set, proposer, seed) is one `search` run of `--per-problem` evaluations per problem over the built kernels and
their knobs (no new builds: the space every proposer shares), in its own store under `--store-dir`; a round's
requests go to the judges as one chunk, so that no GPU waits for another's slowest batch within a round.

The curve of a run is, for b = 1 .. per-problem, the geomean over the set of each problem's best speedup against
cuBLASLt-autotune among its own first b evaluations (0.01 while a problem has none OK); every proposer spends exactly
b per problem there. All runs share one judge (`search.backends.memo`): a (candidate, problem) pair is timed once and
its verdict served to every run that proposes it again, so equal choices get equal times (common measurements) and
the GPU is not spent twice on one pair; each run is charged for its own requests all the same. The uncertainty is
a paired bootstrap over the set's problems (the first seed whose runs are all complete; `--seeds` more for more;
the curves count a seed only where every proposer's run of it is complete): the geomean's 95% interval at each
budget, the rl variants' ratio to random search at the last budget, and the evaluations each needs to reach random
search's final geomean (the issue's target: at most a third of random's).

Time: the study stops starting rounds after `--minutes` and writes what it has; run it again with the same
arguments and `--store-dir` to continue (a GPU call at a time). Throughput: the judge's distinct evaluations per
GPU-minute of the runs' own time.

    python -m studies.budget_hardware --artifacts build/search --store-dir /tmp/keep/budget_hw --minutes 8 \\
        --warm-from benchmarks/results/nvidia_h100_80gb_hbm3/sweep_2026-11-25_a3fd6a0.json.gz \\
        --out benchmarks/results/<gpu_slug>/budget_hardware_<date>.json
"""
from __future__ import annotations

import argparse
import collections
import json
import random
import re
import sys
import time
from pathlib import Path

from cudal2_testing.measure import shapes
from cudal2_testing.measure.shapes import BUCKET_LABELS, bucket_of
from cudal2_testing.measure.summary import geomean, markdown_table
from search import warm_start
from search.backends.memo import MemoBackend
from search.candidate import OK, Problem
from search.errors import UserError, run_command
from search.loop import RunArgs, Search
from search.policy import Policy
from search.store import Store, read_store
from search.table_select import read_sweep
from studies.budget_curves import evals_to_reach, plot, summary_rows, target_table

PROPOSERS = ("random", "rl+warm (other GPU)", "rl", "sweep")   # run in this order: the comparison that matters first
MISSING = 0.01        # a problem with no OK evaluation yet counts as this speedup (as studies.budget_replay)
BOOTSTRAP = 2000      # resamples of the paired bootstrap
START = 1             # curves by per-problem index: every problem has b evaluations at budget b


def problem_sets(count: int, seed: int, decode_max_m: int, names: list[str],
                 decode_ms: list[int] | None = None) -> dict[str, list[Problem]]:
    """The G1000 sample (fp16 NT, stratified, `count` problems for `seed`) and the LLM decode shapes (M up to
    `decode_max_m`, only the M values `decode_ms` when given), as named."""
    sets = {"g1000": lambda: shapes.load("g1000", count, seed),
            "llm_decode": lambda: [s for s in shapes.llm() if s[0] <= decode_max_m and
                                   (decode_ms is None or s[0] in decode_ms)]}
    return {name: [Problem("nt", "fp16", *s) for s in sets[name]()] for name in names}


def other_gpu_sweeps(paths: list[Path], gpu_name: str) -> tuple[list[Path], list[Path]]:
    """(the sweep files measured on another GPU model, those measured on `gpu_name`): leave-one-GPU-out."""
    used, left = [], []
    for path in paths:
        (left if read_sweep(path)["environment"]["gpu_name"] == gpu_name else used).append(path)
    return used, left


def store_path(store_dir: Path, set_name: str, proposer: str, seed: int) -> Path:
    """The store of one (set, proposer, seed) run."""
    return store_dir / f"{set_name}_{re.sub(r'[^a-z0-9]+', '_', proposer).strip('_')}_s{seed}.sqlite"


def best_by_problem(store: Store, run_id: str, problems: list[Problem], per_problem: int) -> dict[str, list[float]]:
    """Problem key -> best speedup among its first b evaluations, b = 1 .. per_problem (MISSING before one is OK).
    A problem's evaluations count in the order they were proposed (the proposals table), not the order their
    verdicts arrived (GPUs finish out of order, and the memo answers what it holds first)."""
    proposed = {(r["round"], r["problem_key"], r["candidate_id"]): r["id"] for r in store.query(
        "SELECT id, round, problem_key, candidate_id FROM proposals WHERE run_id = ? AND status = ''", (run_id,))}
    rows: dict[str, list] = {p.key: [] for p in problems}
    for r in sorted(store.evaluations(run_id),
                    key=lambda r: (proposed.get((r["round"], r["problem_key"], r["candidate_id"]), 0), r["id"])):
        rows[r["problem_key"]].append(r)
    out = {}
    for key, evaluations in rows.items():
        best, curve = MISSING, []
        for b in range(per_problem):
            if b < len(evaluations) and evaluations[b]["status"] == OK and evaluations[b]["us"]:
                best = max(best, evaluations[b]["baseline_us"] / evaluations[b]["us"])
            curve.append(best)
        out[key] = curve
    return out


def geomean_curve(by_problem: dict[str, list[float]], keys: list[str] | None = None) -> list[float]:
    """The geomean over problems (`keys`, with repeats, or all) at each budget."""
    keys = list(by_problem) if keys is None else keys
    return [geomean(by_problem[k][b] for k in keys) for b in range(len(by_problem[keys[0]]))]


def percentile(values: list[float], q: float) -> float:
    """The q-quantile of `values` (nearest rank)."""
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


def bootstrap(by_proposer: dict[str, dict[str, list[float]]], reps: int = BOOTSTRAP, seed: int = 0) -> dict:
    """Paired bootstrap over problems (the same resample for every proposer) of one set's runs: per proposer the
    95% interval of the geomean at each budget; per rl variant the interval of its final geomean over random's and of
    the evaluations it needs to reach random's final geomean (None: not within the budget)."""
    keys = list(next(iter(by_proposer.values())))
    rng = random.Random(seed)
    curves: dict[str, list[list[float]]] = {p: [] for p in by_proposer}
    for _ in range(reps):
        sample = [rng.choice(keys) for _ in keys]
        for proposer, by_problem in by_proposer.items():
            curves[proposer].append(geomean_curve(by_problem, sample))
    out: dict = {"band": {}, "vs_random": {}}
    for proposer, resampled in curves.items():
        out["band"][proposer] = [[percentile(v, 0.025) for v in zip(*resampled)],
                                 [percentile(v, 0.975) for v in zip(*resampled)]]
    if "random" not in curves:
        return out
    final = len(curves["random"][0])
    for proposer in (p for p in curves if p.startswith("rl")):
        ratios = [c[-1] / r[-1] for c, r in zip(curves[proposer], curves["random"])]
        reach = [evals_to_reach(r[-1], c, START) for c, r in zip(curves[proposer], curves["random"])]
        reached = [final + 1 if x is None else x for x in reach]   # (not reached: one past the budget)
        out["vs_random"][proposer] = {"ratio": [percentile(ratios, 0.025), percentile(ratios, 0.975)],
                                      "reach": [percentile(reached, 0.025), percentile(reached, 0.975)],
                                      "within_third": sum(x is not None and x <= final / 3 for x in reach) / reps}
    return out


def run_one(backend: MemoBackend, path: Path, problems: list[Problem], proposer: str, seed: int, per_problem: int,
            warm: list[Path], minutes_left: float, arch: int, backend_kind: str) -> dict:
    """Starts or continues one run in its store until its budget or `minutes_left`; its record."""
    budget = per_problem * len(problems)
    store = Store(path)
    try:
        runs = store.runs()
        elapsed = runs[0]["elapsed_s"] if runs else 0.0
        limit = elapsed / 60 + minutes_left
        if runs and store.evaluation_count(runs[0]["id"]) < budget:
            search = Search.resume(store, backend, runs[0]["id"], overrides={"budget_minutes": limit})
            search.run()
        elif not runs:
            policy_name = proposer.split("+")[0]
            args = RunArgs(policy=policy_name, arch=arch, budget_evals=budget, budget_minutes=limit, seed=seed,
                           max_builds=0, backend=backend_kind, chunk=max(64, RunArgs.per_round * len(problems)),
                           warm_start=[str(p) for p in warm] if "warm" in proposer else [])
            fitted = None
            if args.warm_start:
                fitted = Policy(arch, seed)
                warm_start.warm_start(fitted, warm_start.load(warm), seed)
            search = Search.start(store, backend, args, problems, policy=fitted)
            search.run()
        run = store.runs()[0]
        judged = store.query("SELECT COUNT(*) AS n FROM evaluations WHERE run_id = ? AND eval_s > 0",
                             (run["id"],))[0]["n"]
        count = store.evaluation_count(run["id"])
        return {"evaluations": count, "budget": budget, "complete": count >= budget, "judged": judged,
                "elapsed_s": round(run["elapsed_s"], 1), "gpus": cards_of(store, run["id"]),
                "judge_s_by_bucket": judge_s_by_bucket(store, run["id"]),
                "by_problem": best_by_problem(store, run["id"], problems, per_problem) if count >= budget else None}
    finally:
        store.close()


def judge_s_by_bucket(store: Store, run_id: str) -> dict[str, list[float]]:
    """log2(MNK) bucket -> [evaluations judged here, the judge's seconds on them] (its `eval_s`; a verdict the memo
    served again costs none): where the judge's time goes by problem size."""
    out: dict[str, list[float]] = {}
    for row in store.query("SELECT p.m, p.n, p.k, e.eval_s FROM evaluations e JOIN problems p ON p.key = e.problem_key "
                           "WHERE e.run_id = ? AND e.eval_s > 0", (run_id,)):
        counts = out.setdefault(bucket_of((row["m"], row["n"], row["k"])), [0, 0.0])
        counts[0] += 1
        counts[1] += row["eval_s"]
    return {b: [n, round(t, 1)] for b, (n, t) in sorted(out.items(), key=lambda kv: BUCKET_LABELS.index(kv[0]))}


VARIANTS = 4   # a table regenerates every problem in fp16 and bf16, NN and NT


def regeneration_hours(by_bucket: dict[str, list[float]], problems: list[tuple[int, int, int]],
                       per_problem: int) -> float | None:
    """GPU-hours to judge `per_problem` evaluations of every problem in `problems`, each of the VARIANTS, at a run's
    seconds per judged evaluation in each log2(MNK) bucket (None where the run judged none in a bucket the problems
    need): the issue's whole-table regeneration at the measured rate, every evaluation judged afresh."""
    counts = collections.Counter(bucket_of(p) for p in problems)
    if any(b not in by_bucket or not by_bucket[b][0] for b in counts):
        return None
    return VARIANTS * per_problem * sum(n * by_bucket[b][1] / by_bucket[b][0] for b, n in counts.items()) / 3600


def policy_regeneration_lines(doc: dict) -> list[str]:
    """Markdown: per set, rl variant and complete seed, the evaluations per problem the variant's curve needs to reach
    random search's final geomean and 99% of its own (that seed's curves), and the GPU-hours a whole table's search
    would take at that many evaluations, at that run's own seconds per judged evaluation by size."""
    grid = {name: shapes.load(name) for name in ("g1000", "llm")}
    rows = []
    for name, by_proposer in doc.get("curves", {}).items():
        for proposer in (p for p in by_proposer if p.startswith("rl")):
            for i, seed in enumerate(doc.get("seeds", {}).get(name, range(len(by_proposer[proposer])))):
                curve = by_proposer[proposer][i]
                by_bucket = doc["runs"].get(f"{name}/{proposer}/{seed}", {}).get("judge_s_by_bucket", {})
                cells = []
                for target in (by_proposer["random"][i][-1], 0.99 * curve[-1]):
                    evals = evals_to_reach(target, curve, START)
                    hours = [regeneration_hours(by_bucket, grid[g], evals) if evals else None for g in grid]
                    cells += [str(evals) if evals else f"> {len(curve)}",
                              " + ".join("-" if h is None else f"{h:.1f}" for h in hours)]
                rows.append([name, proposer, str(seed)] + cells)
    if not rows:
        return []
    return ["", "A whole table's search by the policy (every G1000 / LLM problem in fp16 and bf16, NN and NT): the "
                "evaluations per problem its curve needs on each seed, and GPU-hours at that run's judged rate by size "
                "(G1000 + LLM; '-' where the run judged no problem of a size the set has):", ""] + markdown_table(
        ["set", "policy", "seed", "to random's final", "GPU-hours", "to 99% of its own final", "GPU-hours"], rows)


def cards_of(store: Store, run_id: int) -> int | None:
    """How many physical cards judged the run's evaluations (by the UUID in each verdict's environment); None when
    the verdicts name none (the simulator). A run continued over GPU calls of different sizes counts its cards."""
    cards = {json.loads(row["gpu"] or "{}").get("gpu_uuid") for row in store.query(
        "SELECT DISTINCT gpu FROM evaluations WHERE run_id = ? AND eval_s > 0", (run_id,))}
    cards.discard(None)
    return len(cards) or None


def make_backend(kind: str, artifacts: Path, arch: int, seed: int):
    """The judge: this machine's GPUs (`local`, every visible one) or the simulator (`sim`, for the CPU tests)."""
    if kind == "sim":
        from search.simulate import SimulatedBackend  # noqa: PLC0415
        return SimulatedBackend(seed=seed, arch=arch)
    from search.backends.local import LocalBackend  # noqa: PLC0415
    return LocalBackend(artifacts=artifacts, arch=arch)


def study(args: argparse.Namespace, log=print) -> dict:
    """Runs (or continues) every (set, proposer, seed) run; the results document."""
    began = time.monotonic()
    inner = make_backend(args.backend, args.artifacts, args.arch, 0)
    backend = MemoBackend(inner)
    try:
        env = backend.environment()
        warm, left_out = other_gpu_sweeps(args.warm_from, env.get("gpu_name", ""))
        if "rl+warm (other GPU)" in args.proposers and not warm:
            raise UserError(f"--warm-from: no sweep of a GPU other than {env.get('gpu_name')} (leave-one-GPU-out)")
        args.store_dir.mkdir(parents=True, exist_ok=True)
        for path in sorted(args.store_dir.glob("*.sqlite")):
            store = Store(path, readonly=True)
            try:
                backend.remember(store.evaluations())
            finally:
                store.close()
        runs, by_problem = {}, {}
        for seed in range(args.seeds):
            for name, problems in problem_sets(args.shapes, seed, args.decode_max_m, args.sets,
                                                      args.decode_ms).items():
                for proposer in args.proposers:
                    minutes_left = args.minutes - (time.monotonic() - began) / 60
                    path = store_path(args.store_dir, name, proposer, seed)
                    if minutes_left <= 0 and not path.exists():
                        continue
                    record = run_one(backend, path, problems, proposer, seed, args.per_problem, warm,
                                     max(minutes_left, 0.0), args.arch, args.backend)
                    found = record.pop("by_problem")
                    runs[f"{name}/{proposer}/{seed}"] = record
                    if found is not None:
                        by_problem.setdefault(name, {}).setdefault(proposer, {})[seed] = found
                    log(f"seed {seed} {name} ({len(problems)} problems) {proposer}: {record['evaluations']} of "
                        f"{record['budget']} ({record['judged']} judged here)" +
                        (f", geomean {geomean_curve(found)[-1]:.4f}" if found else ""))
        gpus = len(inner.pool.workers) if args.backend == "local" else 1
    finally:
        backend.close()
    return {"environment": env, "gpus": gpus, "warm_from": [str(p) for p in warm],
            "warm_left_out": [str(p) for p in left_out], "runs": runs,
            "by_problem": by_problem, "wall_s": round(time.monotonic() - began, 1)}


def analyse(doc: dict, proposers: list[str]) -> dict:
    """Adds the curves (set -> proposer -> one geomean curve per seed) and each seed's bootstrap (`bootstrap_by_seed`;
    `bootstrap`: the first seed's, whose bands the plot draws), of each set
    over the seeds whose runs of every proposer are complete (`seeds`: set -> those seeds); `by_problem` comes in as
    set -> proposer -> {seed: per-problem bests} and leaves as set -> proposer -> [per-problem bests of those seeds]."""
    complete = {name: sorted(set.intersection(*(set(by_proposer.get(p, {})) for p in proposers)))
                for name, by_proposer in doc["by_problem"].items()}
    doc["seeds"] = {name: seeds for name, seeds in complete.items() if seeds}
    doc["by_problem"] = {name: {p: [doc["by_problem"][name][p][seed] for seed in seeds] for p in proposers}
                         for name, seeds in doc["seeds"].items()}
    doc["curves"] = {name: {p: [geomean_curve(b) for b in per_seed] for p, per_seed in by_proposer.items()}
                     for name, by_proposer in doc["by_problem"].items()}
    doc["bootstrap_by_seed"] = {name: {str(seed): bootstrap({p: per_seed[i] for p, per_seed in by_proposer.items()})
                                       for i, seed in enumerate(doc["seeds"][name])}
                                for name, by_proposer in doc["by_problem"].items()}
    doc["bootstrap"] = {name: next(iter(by_seed.values())) for name, by_seed in doc["bootstrap_by_seed"].items()}
    return doc


def throughput(doc: dict) -> tuple[float, float, int, int, float]:
    """(judged evaluations per GPU-minute, verdicts per GPU-minute, judged, verdicts, GPU-minutes) over the runs'
    own time, each run's on the cards that judged it (else the last call's count; a judged evaluation is one the
    GPU timed; the other verdicts were served again by the memo)."""
    judged = sum(r["judged"] for r in doc["runs"].values())
    verdicts = sum(r["evaluations"] for r in doc["runs"].values())
    gpu_minutes = sum(r["elapsed_s"] * (r.get("gpus") or doc["gpus"]) for r in doc["runs"].values()) / 60
    return (judged / gpu_minutes if gpu_minutes else 0.0, verdicts / gpu_minutes if gpu_minutes else 0.0, judged,
            verdicts, gpu_minutes)


def judge_time_lines(runs: dict, per_problem: int) -> list[str]:
    """Markdown: the judge's seconds per judged evaluation by size for each run, and the GPU-hours a whole table's
    search would take at random search's rates (its every evaluation is judged afresh)."""
    timed = {k: r["judge_s_by_bucket"] for k, r in runs.items() if r.get("judge_s_by_bucket")}
    if not timed:
        return []
    labels = [b for b in BUCKET_LABELS if any(b in by for by in timed.values())]
    lines = ["", "The judge's seconds per evaluation it judged, by log2(M*N*K) (evaluations in brackets):", ""]
    lines += markdown_table(["run"] + labels, [[k] + [f"{by[b][1] / by[b][0]:.2f} ({by[b][0]})" if b in by else "-"
                                                      for b in labels] for k, by in timed.items()])
    grid = {name: shapes.load(name) for name in ("g1000", "llm")}
    hours = {k: [regeneration_hours(by, grid[name], per_problem) for name in grid]
             for k, by in timed.items() if k.split("/")[1] == "random"}
    if hours:
        lines += ["", f"A whole table's search at that rate: GPU-hours to judge {per_problem} evaluations of every "
                      "G1000 / LLM problem in fp16 and bf16, NN and NT (random search's runs; '-' where a run judged "
                      "no problem of a size the set has):", ""]
        lines += markdown_table(["run", "G1000", "LLM"], [[k] + [f"{h:.1f}" if h is not None else "-" for h in hs]
                                                          for k, hs in hours.items()])
    return lines


def render(doc: dict, out: Path) -> str:
    """Writes the Markdown page and the PNG beside `out`; returns the Markdown."""
    env, settings, curves = doc["environment"], doc["settings"], doc.get("curves", {})
    budgets = sorted({b for b in (4, 8, 12, settings["per_problem"]) if b <= settings["per_problem"]})
    rate, verdict_rate, judged, verdicts, gpu_minutes = throughput(doc)
    seeds = {name: ("seeds " if len(of_set) > 1 else "seed ") + ", ".join(map(str, of_set))
             for name, of_set in doc.get("seeds", {}).items()}
    asked = f"seeds 0-{settings['seeds'] - 1}" if settings["seeds"] > 1 else "seed 0"
    measured = {"g1000": f"{settings['shapes']}-problem stratified G1000 sample",
                "llm_decode": f"LLM decode shapes (M <= {settings['decode_max_m']}" + (
                    f", M in {{{', '.join(map(str, settings['decode_ms']))}}})" if settings.get("decode_ms") else ")")}
    lines = [f"# Proposers at equal budgets on the GPU ({env.get('gpu_name')})", "",
             f"- Judged live on {doc['gpus']} x {env.get('gpu_name')} (driver {env.get('driver')}, CUDA "
             f"{env.get('cuda')}, cuBLAS {env.get('cublas')}, torch {env.get('torch')}), PDL off, every verdict by "
             "the search's judge against cuBLASLt-autotune timed in the same judge",
             f"- Sets with every proposer's runs complete: "
             f"{', '.join(f'{measured[name]} ({seeds[name]})' for name in curves) or 'none'}"
             f" (asked: {', '.join(measured[name] for name in settings['sets'])}, {asked}), "
             f"fp16 NT; {settings['per_problem']} evaluations per problem per run; built kernels and their knobs only",
             f"- Warm start (rl+warm) from other GPUs' sweeps: {', '.join(f'`{p}`' for p in doc['warm_from'])}" +
             (f"; left out as this GPU's: {', '.join(f'`{p}`' for p in doc['warm_left_out'])}"
              if doc["warm_left_out"] else ""),
             f"- Commit {doc['commit']}; command: `{doc['command']}`; stores: `{settings['store_dir']}`" +
             (f"; curves measured again from the stores in `{doc['curves_from']}`" if doc.get("curves_from") else ""),
             "",
             f"Throughput: {judged} evaluations judged on the GPU in {gpu_minutes:.1f} GPU-minutes of the runs' own "
             f"time (every GPU held for a run's whole time): {rate:.0f} per GPU-minute; with the {verdicts - judged} "
             f"verdicts served again from common measurements, {verdict_rate:.0f} verdicts per GPU-minute.", ""]
    lines += markdown_table(["run", "evaluations", "judged here", "run s", "GPUs", "judged per GPU-minute"],
                            [[k, f"{r['evaluations']} of {r['budget']}", r["judged"], r["elapsed_s"],
                              r.get("gpus") or doc["gpus"], f"{throughput({'runs': {k: r}, 'gpus': doc['gpus']})[0]:.0f}"]
                             for k, r in doc["runs"].items()])
    lines += judge_time_lines(doc["runs"], settings["per_problem"])
    if not curves:
        text = "\n".join(lines + ["", "No set has all its runs complete yet."]) + "\n"
        out.with_suffix(".md").write_text(text)
        return text
    png = out.with_suffix(".png")
    bands = {name: boot["band"] for name, boot in doc["bootstrap"].items()}
    plot(curves, png, f"{env.get('gpu_name')}: judged live, 95% paired-bootstrap bands", START, bands)
    lines += ["", "Geomean over the set of each problem's best speedup vs cuBLASLt-autotune among its first b "
                  f"evaluations; mean over seeds (per seed in brackets). Curves: {png.name}.", ""]
    lines += markdown_table(["set", "proposer"] + [f"{b} evals/problem" for b in budgets],
                            summary_rows(curves, budgets))
    rows = []
    for name, boot in doc["bootstrap"].items():
        for proposer, (low, high) in boot["band"].items():
            rows.append([name, proposer] + [f"{low[b - 1]:.4f}-{high[b - 1]:.4f}" for b in budgets])
    lines += ["", "95% paired-bootstrap intervals over problems (the first complete seed of each set):", ""]
    lines += markdown_table(["set", "proposer"] + [f"{b}" for b in budgets], rows)
    final = settings["per_problem"]
    lines += ["", f"The target (issue 26): the policy reaches random search's final geomean (at {final} evaluations "
                  "per problem) in at most a third of random's evaluations; the evaluations to reach 99% of it:", ""]
    lines += target_table(curves, START)
    lines += policy_regeneration_lines(doc)
    def evals(b: int) -> str:
        return f"> {final}" if b > final else str(b)
    by_seed = doc.get("bootstrap_by_seed") or {name: {"first": boot} for name, boot in doc["bootstrap"].items()}
    rows = [[name, seed, proposer, f"{v['ratio'][0]:.4f}-{v['ratio'][1]:.4f}",
             f"{evals(v['reach'][0])} to {evals(v['reach'][1])}", f"{v['within_third']:.2f}"]
            for name, boots in by_seed.items() for seed, boot in boots.items()
            for proposer, v in boot["vs_random"].items()]
    if rows:
        lines += ["", f"Paired bootstrap over problems (each complete seed, {BOOTSTRAP} resamples): the rl variant's "
                      "final geomean over random's, the evaluations it needs to reach random's final geomean, and the "
                      "share of resamples in which that is within a third of the budget:", ""]
        lines += markdown_table(["set", "seed", "policy", "ratio to random at the end, 95%",
                                 "evaluations to reach, 95%", "P(within a third)"], rows)
    text = "\n".join(lines) + "\n"
    out.with_suffix(".md").write_text(text)
    return text


def parse(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m studies.budget_hardware", description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True, help="JSON results; .md and .png beside it")
    parser.add_argument("--store-dir", type=Path, help="one search store per run (continued when run again)")
    parser.add_argument("--artifacts", type=Path, default=Path("build/search"), help="the local backend's builds")
    parser.add_argument("--backend", choices=("local", "sim"), default="local")
    parser.add_argument("--arch", type=int, default=90)
    parser.add_argument("--warm-from", type=Path, nargs="*", default=[],
                        help="sweep files; those of other GPU models warm-start rl+warm")
    parser.add_argument("--sets", type=lambda t: t.split(","), default=["g1000", "llm_decode"])
    parser.add_argument("--proposers", type=lambda t: t.split(","), default=list(PROPOSERS))
    parser.add_argument("--shapes", type=int, default=100, help="G1000 problems per seed")
    parser.add_argument("--decode-max-m", type=int, default=64)
    parser.add_argument("--decode-ms", type=lambda t: [int(m) for m in t.split(",")],
                        help="only these M values of the decode shapes (e.g. 1,16,64; default every M up to the max)")
    parser.add_argument("--per-problem", type=int, default=16)
    parser.add_argument("--seeds", type=int, default=1)
    parser.add_argument("--minutes", type=float, default=8.0, help="no round starts after this (then run again)")
    parser.add_argument("--render", action="store_true",
                        help="only write the .md and .png again from --out (with --store-dir: its curves measured "
                             "again from those stores first, plain or .sqlite.gz)")
    args = parser.parse_args(argv)
    unknown = set(args.proposers) - set(PROPOSERS)
    if unknown or set(args.sets) - {"g1000", "llm_decode"}:
        parser.error(f"--proposers take {', '.join(PROPOSERS)}; --sets take g1000, llm_decode")
    if not args.render and args.store_dir is None:
        parser.error("--store-dir is required (except with --render)")
    missing = [str(p) for p in args.warm_from if not p.is_file()]
    if missing:
        parser.error(f"--warm-from: no such file: {', '.join(missing)}")
    return args


def reanalyse(doc: dict, store_dir: Path) -> dict:
    """`doc` with its curves measured again from the runs' stores in `store_dir` (plain or gzip SQLite files), for
    every run the stores hold complete: the same verdicts, counted by the current `best_by_problem`."""
    settings = doc["settings"]
    by_problem: dict = {}
    for seed in range(settings["seeds"]):
        for name, problems in problem_sets(settings["shapes"], seed, settings["decode_max_m"],
                                           settings["sets"], settings.get("decode_ms")).items():
            for proposer in settings["proposers"]:
                path = store_path(store_dir, name, proposer, seed)
                if not path.exists():
                    path = path.with_suffix(".sqlite.gz")
                if not path.exists():
                    continue
                with read_store(path) as store:
                    run = store.runs()[0]
                    record = doc["runs"].get(f"{name}/{proposer}/{seed}")
                    if record is not None:   # the cards of the run as the record saw it (a store continued since
                        if store.evaluation_count(run["id"]) == record["evaluations"]:   # may hold more cards)
                            record["gpus"] = cards_of(store, run["id"])
                        record["judge_s_by_bucket"] = judge_s_by_bucket(store, run["id"])
                    if store.evaluation_count(run["id"]) >= settings["per_problem"] * len(problems):
                        by_problem.setdefault(name, {}).setdefault(proposer, {})[seed] = best_by_problem(
                            store, run["id"], problems, settings["per_problem"])
    return analyse({**doc, "by_problem": by_problem, "curves_from": str(store_dir)}, settings["proposers"])


def main(argv: list[str] | None = None) -> int:
    args = parse(argv)
    if args.render:
        doc = json.loads(args.out.read_text())
        if args.store_dir:
            doc = reanalyse(doc, args.store_dir)
            args.out.write_text(json.dumps(doc, indent=1) + "\n")
        print(render(doc, args.out))
        return 0
    doc = analyse(study(args), args.proposers)
    from cudal2_testing.measure.env import git_commit  # noqa: PLC0415 (imports torch: only for the header)
    doc["commit"] = git_commit()
    doc["command"] = "python -m studies.budget_hardware " + " ".join(argv if argv is not None else sys.argv[1:])
    doc["settings"] = {k: [str(p) for p in v] if k == "warm_from" else str(v) if isinstance(v, Path) else v
                       for k, v in vars(args).items()}
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(doc, indent=1) + "\n")
    print(render(doc, args.out))
    return 0


if __name__ == "__main__":
    run_command(main)
