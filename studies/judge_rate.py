"""The judge's rate in real search runs, by session and by problem size, from search stores.

A resumed run keeps one run id over several sessions (GPU calls); the store has no record of where one ended, so the
verdicts of one GPU model are split into sessions at a pause of more than --gap-min minutes between consecutive
verdicts (`search.run_report.sessions`, as the search's report splits a resumed run). Per session: its verdicts, the
span from its first to its last verdict and the verdicts per minute of it (compiles on the same machine overlapped,
the start-up before the first verdict left out), the judge's summed seconds (`eval_s`) and the verdicts per
judge-minute, the share judged on one case (the screen), the problems judged and those with a verdict over FIND
of the bar (mean over its cases), and the judge's mean seconds for a problem's first verdict
of a round (its baseline timed there) and for the others. Sessions judge different problems, and a problem's size
sets its cost, so each session's rate is also given at one size mix: its mean judge seconds per log2(MNK) bucket
weighted by the pooled sessions' verdict counts, over the buckets every session has at least --min-bucket verdicts in.

    python -m studies.judge_rate --stores A.sqlite.gz B.sqlite.gz --gpu H100 --out judge_rate.md
"""
from __future__ import annotations

import argparse
import collections
import datetime
import json
import statistics
from pathlib import Path

from cudal2_testing.measure.shapes import BUCKET_LABELS, bucket_of
from cudal2_testing.measure.summary import markdown_table
from search.candidate import OK
from search.run_report import sessions
from search.store import read_store
from studies.report_files import write_report

FIND = 1.02   # a problem whose best verdict (mean over its cases) is above this has a find for the tuner


def verdicts(paths: list[Path], gpu: str) -> list[dict]:
    """Every verdict of runs on a GPU whose name holds `gpu`, once (a resumed store repeats its earlier rows), in
    order of time."""
    found = {}
    for path in paths:
        with read_store(path) as store:
            rows = store.query(
                "SELECT e.run_id, e.candidate_id, e.problem_key, e.round, e.created, e.eval_s, e.status, e.case_speedups, "
                "p.m, p.n, p.k FROM evaluations e JOIN problems p ON p.key = e.problem_key JOIN runs r ON r.id = "
                "e.run_id WHERE json_extract(r.environment, '$.gpu_name') LIKE ?", (f"%{gpu}%",))
        for r in rows:
            speedups = json.loads(r["case_speedups"])
            found[(r["run_id"], r["candidate_id"], r["problem_key"])] = {
                "run": r["run_id"], "problem": r["problem_key"], "round": r["round"], "created": r["created"],
                "eval_s": r["eval_s"], "cases": len(speedups),
                "speedup": statistics.mean(speedups) if r["status"] == OK and speedups else None,
                "bucket": bucket_of((r["m"], r["n"], r["k"]))}
    return sorted(found.values(), key=lambda v: v["created"])


def first_of_round(session: list[dict]) -> list[bool]:
    """Whether each verdict is its problem's first in its round (the batch that times a new problem's baseline)."""
    seen = set()
    flags = []
    for row in session:
        key = (row["run"], row["round"], row["problem"])
        flags.append(key not in seen)
        seen.add(key)
    return flags


def session_row(session: list[dict]) -> dict:
    """The rates of one session (see the module docstring)."""
    span = session[-1]["created"] - session[0]["created"]
    judge_s = sum(r["eval_s"] for r in session)
    first = first_of_round(session)
    firsts = [r["eval_s"] for r, f in zip(session, first) if f]
    others = [r["eval_s"] for r, f in zip(session, first) if not f]
    return {"start": datetime.datetime.fromtimestamp(session[0]["created"], datetime.timezone.utc).strftime(
                "%Y-%m-%d %H:%M"),
            "verdicts": len(session), "span_s": span, "per_minute": 60 * len(session) / span if span else None,
            "judge_s": judge_s, "per_judge_minute": 60 * len(session) / judge_s if judge_s else None,
            "one_case": sum(r["cases"] == 1 for r in session) / len(session),
            "problems": len({r["problem"] for r in session}),
            "finds": len({r["problem"] for r in session if (r["speedup"] or 0) > FIND}),
            "first_mean_s": statistics.mean(firsts) if firsts else None,
            "other_mean_s": statistics.mean(others) if others else None,
            "bucket_mean_s": {b: statistics.mean(v) for b, v in by_bucket(session).items()}}


def by_bucket(session: list[dict]) -> dict[str, list[float]]:
    found = collections.defaultdict(list)
    for r in session:
        found[r["bucket"]].append(r["eval_s"])
    return found


def at_common_mix(parts: list[list[dict]], min_bucket: int) -> tuple[list[str], list[float | None]]:
    """(the buckets every session has `min_bucket` verdicts in, each session's verdicts per judge-minute at the
    pooled sessions' verdict mix over them)."""
    counts = [{b: len(v) for b, v in by_bucket(s).items()} for s in parts]
    common = [b for b in BUCKET_LABELS if all(c.get(b, 0) >= min_bucket for c in counts)]
    pooled = {b: sum(c[b] for c in counts) for b in common}
    rates = []
    for s in parts:
        means = {b: statistics.mean(v) for b, v in by_bucket(s).items()}
        weight = sum(pooled.values())
        rates.append(60 * weight / sum(pooled[b] * means[b] for b in common) if common else None)
    return common, rates


def report_lines(rows: list[dict], common: list[str], mixed: list[float | None], args: argparse.Namespace) -> list[str]:
    def num(x, fmt):
        return "-" if x is None else format(x, fmt)
    stores = ", ".join(f"`{p.name}`" for p in args.stores)
    lines = ["# The judge's rate in real search runs", "",
             f"`python -m studies.judge_rate` on the {args.gpu} runs of {stores}; sessions split at pauses over "
             f"{args.gap_min:g} min. Rate at one mix: over buckets {', '.join(common) or 'none'} (log2 MNK), weighted "
             "by the pooled sessions' verdicts.", ""]
    lines += markdown_table(
        ["session (UTC)", "problems", f"over {FIND}", "verdicts", "span s", "per minute", "judge s",
         "per judge-minute", "one case", "first of round s", "others s", "per judge-minute at one mix"],
        [[r["start"], r["problems"], r["finds"], r["verdicts"], f"{r['span_s']:.0f}", num(r["per_minute"], ".0f"), f"{r['judge_s']:.0f}",
          num(r["per_judge_minute"], ".0f"), f"{r['one_case']:.0%}", num(r["first_mean_s"], ".3f"),
          num(r["other_mean_s"], ".3f"), num(m, ".0f")] for r, m in zip(rows, mixed)])
    lines += ["", "Judge seconds per verdict by log2(MNK) bucket (verdicts):", ""]
    lines += markdown_table(["session (UTC)"] + list(BUCKET_LABELS),
                            [[r["start"]] + [num(r["bucket_mean_s"].get(b), ".3f") for b in BUCKET_LABELS]
                             for r in rows])
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.judge_rate", description=__doc__.splitlines()[0])
    parser.add_argument("--stores", type=Path, nargs="+", required=True)
    parser.add_argument("--gpu", required=True, help="runs on a GPU whose name holds this (e.g. H100)")
    parser.add_argument("--gap-min", type=float, default=10.0)
    parser.add_argument("--min-sessions-verdicts", type=int, default=100,
                        help="leave out sessions with fewer verdicts (a resume that judged a few problems)")
    parser.add_argument("--min-bucket", type=int, default=50)
    parser.add_argument("--out", type=Path, required=True, help="Markdown report; its JSON beside it")
    args = parser.parse_args(argv)
    parts = [s for s in sessions(verdicts(args.stores, args.gpu), args.gap_min * 60)
             if len(s) >= args.min_sessions_verdicts]
    rows = [session_row(s) for s in parts]
    common, mixed = at_common_mix(parts, args.min_bucket)
    write_report(args.out, report_lines(rows, common, mixed, args),
                 {"stores": [str(p) for p in args.stores], "gpu": args.gpu, "gap_min": args.gap_min,
                  "common_buckets": common, "sessions": [{**r, "per_judge_minute_at_one_mix": m}
                                                         for r, m in zip(rows, mixed)]})
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
