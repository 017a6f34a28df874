"""`python -m search report`: a store's runs as Markdown with plots (matplotlib, Agg).

Sections: runs; throughput (evaluations per minute, compile time included and excluded); policies compared at equal
evaluation budget (each run cut to the smallest run's count, over the problems they share); where the evaluations went
(by kernel family, with the slow verdicts and the finds); best speedup per shape;
reward and best-geomean curves by policy; what the policy learned (most probable values per dimension for a problem
of each log2(MNK) bucket); compile and evaluation counts; failures by status with example reasons. The winners'
patterns by problem size are a study of the store (`python -m studies.findings --store STORE`).
"""
from __future__ import annotations

import collections
import datetime
import json
import math
from pathlib import Path
from typing import Callable

from cudal2_catalog.config import HgemmConfig
from cudal2_testing.measure.figures import save_png
from cudal2_testing.measure.shapes import BUCKET_LABELS, bucket_of
from search.candidate import OK
from cudal2_testing.measure.summary import geomean, markdown_table
from search.policy import Policy
from search.proposers import VETO_BELOW
from search.store import Store

EXAMPLE_REASONS = 2


def best_within(evaluations: list, count: int | None = None) -> dict[str, float]:
    """Problem key -> best speedup among the first `count` evaluations (all when None)."""
    best: dict[str, float] = {}
    for e in evaluations[:count]:
        if e["status"] == OK and e["us"]:
            best[e["problem_key"]] = max(best.get(e["problem_key"], 0.0), e["baseline_us"] / e["us"])
    return best


def _fmt(x: float) -> str:
    return "-" if x is None or (isinstance(x, float) and math.isnan(x)) else f"{x:.3f}"


def policy_comparison(store: Store) -> tuple[list[str], dict[str, list]]:
    """The equal-budget comparison lines and, per run id, its evaluations (for the curves)."""
    runs = store.runs()
    evaluations = {r["id"]: store.evaluations(r["id"]) for r in runs}
    if not runs:
        return ["No runs."], evaluations
    budget = min(len(v) for v in evaluations.values())
    best = {rid: best_within(evs, budget) for rid, evs in evaluations.items()}
    shared = set.intersection(*(set(b) for b in best.values())) if best else set()
    rows = [[r["id"], r["policy"], budget, len(shared), _fmt(geomean([best[r["id"]][k] for k in shared])),
             _fmt(geomean([max(1.0, best[r["id"]][k]) for k in shared]))] for r in runs]
    lines = [f"Every run cut to its first {budget} evaluations; geomean over the {len(shared)} problems all runs "
             "measured (raw best speedup, and with cuBLASLt kept where nothing wins):", ""]
    header = ["run", "policy", "evaluations", "problems", "geomean best", "geomean table"]
    return lines + markdown_table(header, rows), evaluations


def learned(store: Store) -> list[str]:
    """Top values per dimension, for a representative problem of each bucket, from each rl run's latest policy."""
    lines = []
    for run in store.runs():
        snapshot = store.latest_policy(run["id"])
        if run["policy"] != "rl" or snapshot is None:
            continue
        policy = Policy.from_json(snapshot)
        by_bucket = collections.defaultdict(list)
        for p in store.run_problems(run["id"]):
            by_bucket[bucket_of((p.m, p.n, p.k))].append(p)
        lines += [f"Run {run['id']} ({policy.updates} updates): the most probable family and, for it, each "
                  "dimension's top values (probability), at the median problem of each log2(MNK) bucket.", ""]
        rows = []
        for bucket in BUCKET_LABELS:
            if not by_bucket[bucket]:
                continue
            problem = sorted(by_bucket[bucket], key=lambda p: p.m * p.n * p.k)[len(by_bucket[bucket]) // 2]
            top = policy.top_values(problem, 2)
            family = top["family"][0][0]
            dims = {d.split(".", 1)[1]: v for d, v in top.items() if d.startswith(family + ".")}
            rows.append([bucket, problem.key, f"{family} ({top['family'][0][1]})",
                         "; ".join(f"{d}: " + ", ".join(f"{v} ({p})" for v, p in vals) for d, vals in dims.items())])
        lines += markdown_table(["bucket", "problem", "family", "top values"], rows) + [""]
    return lines or ["No rl run with a policy snapshot."]


def counts(store: Store) -> list[str]:
    """Compile and evaluation counts, failures by status with example reasons."""
    compiles = store.query("SELECT ok, COUNT(*) AS n, SUM(seconds) AS s FROM compiles GROUP BY ok")
    lines = ["Compiles: " + ", ".join(f"{'ok' if r['ok'] else 'failed'} {r['n']} ({r['s']:.0f} s)" for r in compiles),
             ""]
    status_rows = store.query("SELECT run_id, status, COUNT(*) AS n FROM evaluations GROUP BY run_id, status")
    proposal_rows = store.query("SELECT run_id, status, COUNT(*) AS n FROM proposals WHERE status != '' "
                                "GROUP BY run_id, status")
    lines += markdown_table(["run", "verdict", "count"], [[r["run_id"], r["status"], r["n"]] for r in status_rows] +
                    [[r["run_id"], f"proposal {r['status']}", r["n"]] for r in proposal_rows])
    lines += ["", "Failures by status (example reasons):", ""]
    failures = store.query("SELECT status, reason FROM evaluations WHERE status != 'ok' UNION ALL "
                           "SELECT status, reason FROM proposals WHERE status != ''")
    by_status = collections.defaultdict(list)
    for r in failures:
        by_status[r["status"]].append(r["reason"])
    for status, reasons in sorted(by_status.items()):
        examples = "; ".join(sorted(set(x.splitlines()[0][:120] for x in reasons if x))[:EXAMPLE_REASONS])
        lines.append(f"- {status}: {len(reasons)}" + (f" (e.g. {examples})" if examples else ""))
    return lines


def plots(store: Store, evaluations: dict[str, list], out: Path) -> list[str]:
    """Writes the PNGs; their Markdown image lines."""
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    policy_of = {r["id"]: r["policy"] for r in store.runs()}
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for rid, evs in evaluations.items():
        best = best_within(evs)
        keys = sorted(best, key=lambda k: math.prod(int(x) for x in k.split("_")[2:]))
        ax.plot([math.log2(math.prod(int(x) for x in k.split("_")[2:])) for k in keys], [best[k] for k in keys],
                "o", ms=3, label=f"{policy_of[rid]} {rid}")
    ax.axhline(1.0, color="gray", lw=0.8)
    ax.set(xlabel="log2(M*N*K)", ylabel="best speedup vs cuBLASLt-autotune", title="Best speedup per shape")
    ax.legend(fontsize=7)
    save_png(fig, out / "best_speedup_per_shape.png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(11, 4))
    for rid, evs in evaluations.items():
        rewards = [e["reward"] for e in evs]
        window = max(1, len(rewards) // 20)
        smooth = [sum(rewards[max(0, i - window):i + 1]) / len(rewards[max(0, i - window):i + 1])
                  for i in range(len(rewards))]
        ax1.plot(smooth, label=f"{policy_of[rid]} {rid}")
        marks = sorted(set(range(0, len(evs), max(1, len(evs) // 40))) | {len(evs)})
        ax2.plot(marks, [geomean(list(best_within(evs, n).values())) for n in marks], label=policy_of[rid])
    ax1.set(xlabel="evaluation", ylabel="reward (moving mean)", title="Reward by policy")
    ax2.set(xlabel="evaluation", ylabel="geomean best speedup (measured problems)", title="Best so far")
    ax1.legend(fontsize=7)
    ax2.legend(fontsize=7)
    save_png(fig, out / "reward_by_policy.png", dpi=120, bbox_inches="tight")
    plt.close(fig)
    return ["![best speedup per shape](best_speedup_per_shape.png)", "", "![reward by policy](reward_by_policy.png)"]


def _verdicts_by(evaluations: list, group: Callable[[dict], object]) -> dict[object, collections.Counter]:
    """Per group of `evaluations` (`group` names an evaluation's): its evaluations, its problems, and its judged
    verdicts under VETO_BELOW of the bar ("slow") and over the bar ("finds")."""
    counts: dict[object, collections.Counter] = collections.defaultdict(collections.Counter)
    problems: dict[object, set] = collections.defaultdict(set)
    for e in evaluations:
        key = group(e)  # once per evaluation: a family's costs a store lookup
        n = counts[key]
        n["evaluations"] += 1
        problems[key].add(e["problem_key"])
        if e["status"] == OK and e["us"]:
            speedup = e["baseline_us"] / e["us"]
            n["slow"] += speedup < VETO_BELOW
            n["finds"] += speedup > 1.0
    for key, n in counts.items():
        n["problems"] = len(problems[key])
    return counts


def spending(store: Store) -> list[str]:
    """Where each run's evaluations went, by kernel family: how many, how many of the judged ones came in under
    VETO_BELOW of the bar (the waste the proposer's veto answers) and over it (finds)."""
    def family(e: dict) -> str:
        config = store.candidate(e["candidate_id"]).config
        return HgemmConfig.from_name(config).family if config else "source"

    rows = []
    for run in store.runs():
        evaluations = store.evaluations(run["id"])
        by_family = _verdicts_by(evaluations, family)
        for name, n in sorted(by_family.items(), key=lambda item: -item[1]["evaluations"]):
            rows.append([run["id"], name, n["evaluations"], f"{n['evaluations'] / len(evaluations):.0%}", n["slow"],
                         n["finds"]])
    lines = [f"Each run's evaluations by family: verdicts under {VETO_BELOW} of the bar (what the veto keeps a kernel "
             "from repeating near where it was measured) and over it (finds).", ""]
    return lines + markdown_table(["run", "family", "evaluations", "share", f"under {VETO_BELOW}", "over 1.0"], rows)


def spending_by_round(store: Store) -> list[str]:
    """Where each run's evaluations went, by round: a problem's first visit (round 0, from the policy's prior and
    the neighbours' verdicts alone) against its revisits (round 1 on, with its own verdicts and elites), each with the
    problems visited and the judged verdicts under VETO_BELOW of the bar and over it."""
    rows = []
    for run in store.runs():
        by_round = _verdicts_by(store.evaluations(run["id"]), lambda e: e["round"])
        for number, n in sorted(by_round.items()):
            rows.append([run["id"], number, n["problems"], n["evaluations"], f"{n['slow'] / n['evaluations']:.0%}",
                         n["finds"]])
    lines = ["The same by round: first visits (round 0) against revisits.", ""]
    return lines + markdown_table(["run", "round", "problems", "evaluations", f"share under {VETO_BELOW}", "over 1.0"],
                                  rows)


SESSION_GAP_S = 600.0   # verdicts further apart than this are of different sessions (a resumed run's GPU calls)


def sessions(rows: list, gap_s: float = SESSION_GAP_S) -> list[list]:
    """Rows with a `created` time, in time order, split where consecutive ones are more than `gap_s` apart: a resumed
    run keeps its id over several sessions and the store has no record of where one ended, while one session's
    verdicts are seconds apart."""
    out: list[list] = []
    for row in rows:
        if not out or row["created"] - out[-1][-1]["created"] > gap_s:
            out.append([])
        out[-1].append(row)
    return out


def session_rows(store: Store) -> list[list]:
    """Per session of each run that has several: run, first verdict's UTC time, verdicts, seconds from the first
    verdict to the last and verdicts per minute of them, the judge's seconds and verdicts per judge-minute."""
    rows = []
    for r in store.runs():
        verdicts = store.query("SELECT created, eval_s FROM evaluations WHERE run_id = ? ORDER BY created", (r["id"],))
        parts = sessions(verdicts)
        for part in parts if len(parts) > 1 else []:
            span = part[-1]["created"] - part[0]["created"]
            judge_s = sum(v["eval_s"] for v in part)
            start = datetime.datetime.fromtimestamp(part[0]["created"], datetime.timezone.utc)
            rows.append([r["id"], start.strftime("%Y-%m-%d %H:%M"), len(part), f"{span:.0f}",
                         f"{60 * len(part) / span:.1f}" if span else "-", f"{judge_s:.0f}",
                         f"{60 * len(part) / judge_s:.1f}" if judge_s else "-"])
    return rows


def throughput(store: Store) -> list[str]:
    """Evaluations per minute of each run: over the run's own time (proposals, compiles and waits for them, the
    judge, the store: everything a GPU session holds the GPU for) and over the judge's time alone (the sum of its
    per-candidate times, baseline included: compile time excluded)."""
    rows = []
    for r in store.runs():
        judged = store.query("SELECT COUNT(*) AS n, SUM(eval_s) AS s FROM evaluations WHERE run_id = ? AND eval_s > 0",
                             (r["id"],))[0]
        total = store.evaluation_count(r["id"])
        builds = store.query("SELECT COUNT(*) AS n, SUM(seconds) AS s FROM compiles WHERE run_id = ? AND prebuilt = 0",
                             (r["id"],))[0]
        rows.append([r["id"], total, f"{r['elapsed_s']:.0f}",
                     f"{60 * total / r['elapsed_s']:.1f}" if r["elapsed_s"] else "-", judged["n"],
                     f"{judged['s'] or 0:.0f}", f"{60 * judged['n'] / judged['s']:.1f}" if judged["s"] else "-",
                     f"{builds['n']} ({builds['s'] or 0:.0f} s)"])
    return ["Evaluations per minute (one GPU per run unless the run used several: the rates are then per run, not "
            "per GPU). Compile included: all verdicts over the run's own time; compile excluded: the verdicts the "
            "judge reached over the judge's summed time per candidate.", ""] + markdown_table(
        ["run", "verdicts", "run s", "per minute, compile included", "judged", "judge s",
         "per judge-minute, compile excluded", "new builds (compile s)"], rows) + by_session(store)


def by_session(store: Store) -> list[str]:
    """The rates of each session of a resumed run (`session_rows`), or nothing when no run was resumed."""
    rows = session_rows(store)
    if not rows:
        return []
    return ["", f"A resumed run by session (verdicts more than {SESSION_GAP_S / 60:.0f} minutes apart are of different "
            "sessions): its verdicts over the time from its first verdict to its last (the start-up before the first "
            "left out) and over the judge's time.", ""] + markdown_table(
        ["run", "session (UTC)", "verdicts", "first to last s", "per minute", "judge s", "per judge-minute"], rows)


def write_report(store: Store, out: Path, source: Path | None = None) -> Path:
    """Writes `out/report.md` and its plots; returns the Markdown's path. `source` names the store's file in the
    report (default the store's own path; a gzip copy is read from a temporary file)."""
    out.mkdir(parents=True, exist_ok=True)
    comparison, evaluations = policy_comparison(store)
    run_rows = []
    for r in store.runs():
        evs = evaluations[r["id"]]
        best = best_within(evs)
        run_rows.append([r["id"], r["policy"], json.loads(r["environment"]).get("gpu_name", "?"), len(evs),
                         f"{len(best)}/{len(store.run_problems(r['id']))}", f"{r['elapsed_s'] / 60:.1f}",
                         _fmt(geomean(list(best.values()))), "yes" if r["finished"] else "no"])
    best_rows = []
    for rid, evs in evaluations.items():
        best = best_within(evs)
        for key in sorted(best, key=lambda k: -best[k])[:10] + sorted(best, key=lambda k: best[k])[:5]:
            best_rows.append([rid, key, _fmt(best[key])])
    lines = ["# Search report", "", f"Store: `{source or store.path}`", "", "## Runs", ""]
    lines += markdown_table(["run", "policy", "GPU", "evaluations", "problems measured", "minutes", "geomean best",
                     "finished"], run_rows)
    lines += ["", "## Throughput", ""] + throughput(store)
    lines += ["", "## Policies at equal budget", ""] + comparison
    lines += ["", "## Where the evaluations went", ""] + spending(store) + [""] + spending_by_round(store)
    lines += ["", "## Best speedup per shape", "", "The 10 best and 5 worst problems of each run:", ""]
    lines += markdown_table(["run", "problem", "best speedup"], best_rows)
    lines += ["", "## Plots", ""] + plots(store, evaluations, out)
    lines += ["", "## What the policy learned", ""] + learned(store)
    lines += ["", "## Compiles, evaluations and failures", ""] + counts(store)
    path = out / "report.md"
    path.write_text("\n".join(lines) + "\n")
    return path
