"""Verdict on candidate kernels from a sweep that timed them beside the built ones (`scripts/gpu_check.sh ... candidates`).

Per problem: cuBLASLt-autotune, the fastest correct candidate and the fastest correct built kernel, and whether a
candidate would enter a table (it is the problem's table winner under `search.table_select`'s rule: fastest correct
kernel, faster than cuBLASLt by more than the margin). And each candidate that differs from a kernel only in its
code-level fields (sm80_cute's register pipeline, prefetch depth, staggered copies, epilogue, split-K policy, decode's
weight stream) against that default-code twin, where both ran correctly at default knobs: what the code-level choice
alone is worth. Pure apart from the CLI; CPU-tested.

    python -m studies.candidate_report SWEEP --candidates NAME[,NAME...] [--margin 0.03] [--out report.md]
"""
from __future__ import annotations

import argparse
import dataclasses
from pathlib import Path

from cudal2_catalog.config import DEFAULT_KNOBS, FAMILY_FIELDS, HgemmConfig, Knobs
from cudal2_testing.measure.summary import geomean, markdown_table
from search.table_select import DEFAULT_MARGIN, best_candidate, from_sweep_rows, read_sweep


def fastest_of(row: dict, names: set[str], inside: bool) -> dict | None:
    """The fastest correct timed candidate of `row` whose kernel is (inside=True) or is not in `names`."""
    timed = [c for c in row["candidates"] if c.get("correct") and c.get("us") and (c["kernel"] in names) == inside]
    return min(timed, key=lambda c: c["us"], default=None)


def compare(rows: list[dict], candidates: set[str], margin: float = DEFAULT_MARGIN) -> list[dict]:
    """One record per row: baseline, best candidate, best built kernel (None where none ran correctly), and whether
    a candidate wins the row's table entry."""
    out = []
    for row in rows:
        winner = best_candidate(from_sweep_rows([row])[0], margin)
        out.append({"problem": (row["layout"], row["dtype"], row["m"], row["n"], row["k"]),
                    "baseline_us": row.get("baseline_us"), "candidate": fastest_of(row, candidates, True),
                    "built": fastest_of(row, candidates, False),
                    "enters": winner is not None and winner.kernel in candidates})
    return out


def summary(records: list[dict]) -> dict:
    """Counts and geomean speedups (> 1: the candidate is faster) of the best candidate against cuBLASLt and against
    the best built kernel, over the problems where each pair was timed."""
    vs_lt = [r["baseline_us"] / r["candidate"]["us"] for r in records if r["candidate"] and r["baseline_us"]]
    vs_built = [r["built"]["us"] / r["candidate"]["us"] for r in records if r["candidate"] and r["built"]]
    return {"problems": len(records), "enters": sum(r["enters"] for r in records),
            "geomean_vs_cublaslt": geomean(vs_lt), "geomean_vs_built": geomean(vs_built)}


CODE_FIELDS = (*FAMILY_FIELDS, "epilogue", "splitk")  # HgemmConfig fields that change a kernel's code, not its tile


def default_code_twin(name: str) -> str | None:
    """Kernel `name` with every code-level field at its default, or None when `name` is no kernel config or already
    has default code."""
    try:
        cfg = HgemmConfig.from_name(name)
    except ValueError:
        return None
    twin = dataclasses.replace(cfg, **{f.name: f.default for f in dataclasses.fields(HgemmConfig)
                                       if f.name in CODE_FIELDS})
    return None if twin == cfg else twin.name


def twin_speedups(rows: list[dict], candidates: set[str]) -> dict[str, list[float]]:
    """{candidate: [twin time / candidate time on each problem where both ran correctly at default knobs]} for the
    candidates with a default-code twin (> 1: the code-level choice is faster)."""
    out: dict[str, list[float]] = {}
    timed = [{c["kernel"]: c["us"] for c in row["candidates"]  # per row: correct times at default knobs
              if c.get("correct") and c.get("us") and Knobs.from_dict(c) == DEFAULT_KNOBS} for row in rows]
    for name in sorted(candidates):
        twin = default_code_twin(name)
        if twin is None:
            continue
        for us in timed:
            if name in us and twin in us:
                out.setdefault(name, []).append(us[twin] / us[name])
    return out


def summary_line(s: dict, margin: float) -> str:
    """One sentence of `summary`'s figures."""
    return (f"{s['problems']} problems; a candidate would enter the table (fastest correct kernel, faster than "
            f"cuBLASLt by more than {margin:.0%}) on {s['enters']}; best candidate vs cuBLASLt geomean "
            f"{s['geomean_vs_cublaslt']:.3f}, vs the best built kernel {s['geomean_vs_built']:.3f} (> 1: candidate "
            "faster)")


def _cell(cand: dict | None) -> str:
    if cand is None:
        return "-"
    knobs = " (" + ", ".join(f"{name} {value}" for name, value in Knobs.from_dict(cand).to_dict().items()) + ")"
    return f"{cand['us']:.2f} `{cand['kernel']}`{knobs}"


def markdown(doc: dict, candidates: set[str], margin: float = DEFAULT_MARGIN) -> str:
    """The report: environment, protocol, summary, then one line per problem."""
    records = compare(doc["rows"], candidates, margin)
    s = summary(records)
    env = doc["environment"]
    lines = [f"# Candidate kernels vs built kernels vs cuBLASLt-autotune ({doc['run_id']})", "",
             f"- GPU: {env['gpu_name']} ({env['sm_count']} SMs), driver {env.get('driver')}, CUDA {env['cuda']}, "
             f"torch {env.get('torch')}, CUTLASS {env.get('cutlass')}, commit {env.get('commit')}, PDL disabled: "
             f"{env.get('pdl_disabled')}",
             f"- protocol: {doc['protocol']}",
             f"- candidates: {', '.join(f'`{n}`' for n in sorted(candidates))}",
             f"- {summary_line(s, margin)}", "",
             "| layout | dtype | M | N | K | cuBLASLt us | best candidate us | best built us | enters |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in records:
        lt = f"{r['baseline_us']:.2f}" if r["baseline_us"] else "-"
        lines.append("| " + " | ".join(map(str, r["problem"])) + f" | {lt} | {_cell(r['candidate'])} | "
                     f"{_cell(r['built'])} | {'yes' if r['enters'] else 'no'} |")
    twins = twin_speedups(doc["rows"], candidates)
    if twins:
        lines += ["", "Each candidate against its default-code twin (the same kernel with every code-level field at its "
                  "default), both correct at default knobs: twin time / candidate time (> 1: the code-level choice is "
                  "faster)", ""]
        lines += markdown_table(["candidate", "twin", "problems", "geomean", "min", "max"],
                                [[f"`{name}`", f"`{default_code_twin(name)}`", len(r), f"{geomean(r):.3f}",
                                  f"{min(r):.3f}", f"{max(r):.3f}"] for name, r in twins.items()])
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.candidate_report",
                                     description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("sweep", type=Path, help="sweep results file (.json or .json.gz)")
    parser.add_argument("--candidates", required=True, help="comma-separated names of the candidate kernels")
    parser.add_argument("--margin", type=float, default=DEFAULT_MARGIN)
    parser.add_argument("--out", type=Path, help="write the markdown report here (default: print it)")
    args = parser.parse_args(argv)
    doc = read_sweep(args.sweep)
    candidates = {n.strip() for n in args.candidates.split(",") if n.strip()}
    missing = candidates - set(doc["kernels"])
    if missing:
        parser.error(f"not in the sweep's kernels: {', '.join(sorted(missing))}")
    text = markdown(doc, candidates, args.margin)
    if args.out:
        args.out.write_text(text)
        print(summary_line(summary(compare(doc["rows"], candidates, args.margin)), args.margin))
    else:
        print(text, end="")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
