"""Regenerates a GPU's shipped measured choices: tunes every problem of the reference grids (G1000 and the LLM
projection shapes, M = 1 ... 16384) in the given layouts and dtypes with `cudal2_ops.tune` (every cuBLASLt heuristic
candidate, the table's kernel for the problem, with --sweeps the fastest kernels a sweep or a search store measured
on it, with --grid-up-to, on problems up to that size, every loaded kernel at each variant of its knob grid, and with
--knobs-from, on problems above that size, those kernels and the kernels fastest on most measured problems of the
same size band at each variant of theirs; PDL off) and writes the table
plus a results file. `--merge RESULTS...` writes the table of several such runs made in parallel from one base.

    python scripts/tune_grid.py --shapes g1000,llm --layouts nn,nt --dtypes fp16,bf16 \\
        --base kernels/sm90/nvidia_h100_80gb_hbm3.json --out OUT/nvidia_h100_80gb_hbm3.json --results OUT/tune.json

The table keeps the base table's entries for problems not tuned here. Before it ships, the sanitizer gate
(`python -m search.sanitize_gate`) withholds entries of kernels compute-sanitizer has not run clean. The results file
holds the environment, the time each (shape set, layout, dtype) took and the summary of what changed.
"""
from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # the repository's packages, build_tools included

from build_tools.kernel_lib import select_kernel_names  # noqa: E402
from cudal2_ops import tune  # noqa: E402
from cudal2_ops.tables import entry_key, parse_key  # noqa: E402
from cudal2_testing.measure import env, shapes  # noqa: E402
from cudal2_testing.measure.stored import read_json  # noqa: E402
from search import emit  # noqa: E402
from search.store import is_store_file, read_store  # noqa: E402
from search.table_select import Measured, from_sweep_rows, merge_sweeps, read_sweep  # noqa: E402

SWEEP_TOP = 3  # a sweep's fastest kernels per problem that the tuner times beside the table's
BAND_TOP = 2   # kernels that were fastest most often in a size band, timed on every --knobs-from problem of the band


def problems_of(shape_set: str, layout: str, dtype: str, sample: int | None, seed: int) -> list[tune.Problem]:
    """The problems of one shape set in one layout and dtype."""
    return [tune.Problem(layout, dtype, m, n, k) for m, n, k in shapes.load(shape_set, sample, seed)]


def measured_by_gpu(paths: list[Path]) -> dict[tuple, list[Measured]]:
    """{(GPU name, SM count): measurements} of sweep files (one GPU's merged, the later file winning per problem)
    and search stores (each evaluation's problem, time and the judge's cuBLASLt-autotune time)."""
    sweeps: dict[tuple, list[dict]] = {}
    found: dict[tuple, list[Measured]] = {}
    for path in paths:
        if is_store_file(path):
            with read_store(path) as store:
                for gpu in emit.measurements(store):
                    found.setdefault((gpu.environment["gpu_name"], gpu.environment.get("sm_count")), []).extend(
                        gpu.measured)
            continue
        sweep = read_sweep(path)
        sweeps.setdefault((sweep["environment"]["gpu_name"], sweep["environment"]["sm_count"]), []).append(sweep)
    for gpu, docs in sweeps.items():
        found.setdefault(gpu, []).extend(from_sweep_rows(merge_sweeps(docs)["rows"]))
    return found


def sweep_kernels(paths: list[Path], top: int = SWEEP_TOP) -> dict[str, list[tuple[str, tune.Knobs]]]:
    """{problem key: kernels} from sweep files (`python -m search.sweep`) and search stores: the `top` fastest correct
    candidates of each problem that were faster than the cuBLASLt-autotune they were measured against. Measurements
    of other GPUs add their kernels to a problem's list (a kernel that won on another GPU is a candidate worth timing
    here: the tuner times every candidate on this GPU and skips names the library lacks)."""
    found: dict[str, list[tuple[str, tune.Knobs]]] = {}
    for measured in measured_by_gpu(paths).values():
        for key, kernels in fastest_per_problem(measured, top).items():
            found[key] = list(dict.fromkeys(found.get(key, []) + kernels))
    return found


def fastest_per_problem(measured: list[Measured], top: int) -> dict[str, list[tuple[str, tune.Knobs]]]:
    """{problem key: the `top` fastest correct kernels under the baseline} of one GPU's measurements (a problem
    measured more than once: the fastest of all); a problem measured in one of fp16 / bf16 only also gets its twin's
    kernels in its own dtype (kernel names carry the dtype)."""
    fast_by_key: dict[str, list] = {}
    for m in measured:
        fast_by_key.setdefault(m.key, []).extend(
            c for c in m.candidates if c.correct and c.us and m.baseline_us and c.us < m.baseline_us)
    found = {key: list(dict.fromkeys((c.kernel, c.knobs) for c in sorted(fast, key=lambda c: c.us)))[:top]
             for key, fast in fast_by_key.items() if fast}
    twin_dtype = {"fp16": "bf16", "bf16": "fp16"}
    for key, kernels in list(found.items()):
        layout, dtype, m, n, k = parse_key(key)
        twin_key = entry_key(layout, twin_dtype[dtype], m, n, k)
        if twin_key not in fast_by_key:
            found[twin_key] = [(name.replace(f"_{dtype}_", f"_{twin_dtype[dtype]}_", 1), knobs)
                               for name, knobs in kernels]
    return found


def band_of(m: int, n: int, k: int) -> int:
    """The size band of a problem: log2(M*N*K) rounded down to an even number (the reports' buckets)."""
    return int(math.log2(m * n * k)) // 2 * 2


def band_winners(paths: list[Path], top: int = BAND_TOP) -> dict[int, list[str]]:
    """{size band: the `top` kernels that were a problem's fastest (under its baseline) on most problems of the band}
    in the sweeps and stores, as name patterns with the layout and dtype left open ("{dtype}_{layout}"). On the
    H200's largest G1000 problems one kernel at one knob setting won nearly every measured problem, so in knobs mode
    a band's winners are worth timing on the band's problems no sweep or search measured."""
    wins: dict[int, dict[str, int]] = {}
    for measured in measured_by_gpu(paths).values():
        for key, kernels in fastest_per_problem(measured, 1).items():
            layout, dtype, m, n, k = parse_key(key)
            marker = f"_{dtype}_{layout}_"
            if marker in kernels[0][0]:
                pattern = kernels[0][0].replace(marker, "_{dtype}_{layout}_", 1)
                counts = wins.setdefault(band_of(m, n, k), {})
                counts[pattern] = counts.get(pattern, 0) + 1
    return {band: sorted(counts, key=lambda name: -counts[name])[:top] for band, counts in wins.items()}


def with_band_winners(extra: dict[str, list[tuple[str, tune.Knobs]]], problems: list[tune.Problem],
                      winners: dict[int, list[str]]) -> dict[str, list[tuple[str, tune.Knobs]]]:
    """`extra` with each problem's band winners (default knobs; knobs mode times their variants) added to its list."""
    more = dict(extra)
    for p in problems:
        names = [pattern.format(dtype=p.dtype, layout=p.layout) for pattern in winners.get(band_of(p.m, p.n, p.k), [])]
        more[p.key] = list(dict.fromkeys(more.get(p.key, []) + [(name, tune.DEFAULT_KNOBS) for name in names]))
    return more


def in_band(problem: tune.Problem, min_log2_mnk: float | None, max_log2_mnk: float | None) -> bool:
    """Whether 2^min < M*N*K <= 2^max (a bound left None is open)."""
    mnk = problem.m * problem.n * problem.k
    return ((min_log2_mnk is None or mnk > 2 ** min_log2_mnk) and
            (max_log2_mnk is None or mnk <= 2 ** max_log2_mnk))


def wanted(problem: tune.Problem, args: argparse.Namespace, base_entries: dict, extra: dict,
           listed: set[str] | None = None) -> bool:
    """Whether this run tunes `problem`: in the size band, with --missing-only only where the base has no entry, with
    --sweep-problems-only only where the sweeps found a kernel under its baseline (`extra`), and with --problems-from
    only the problems it lists (`listed`)."""
    return (in_band(problem, args.min_log2_mnk, args.max_log2_mnk) and
            not (args.missing_only and problem.key in base_entries) and
            not (args.sweep_problems_only and problem.key not in extra) and
            (listed is None or problem.key in listed))


def modes_of(problems: list[tune.Problem], grid_up_to: float | None,
             knobs_from: float | None = None) -> list[tuple[str, list[tune.Problem]]]:
    """(kernel mode, problems) parts of a size-sorted problem list: "grid" for those up to 2^grid_up_to, "knobs" for
    those above 2^knobs_from, "table" for the rest; empty parts left out."""
    low = 2 ** grid_up_to if grid_up_to is not None else 0
    high = 2 ** knobs_from if knobs_from is not None else math.inf
    parts = [("grid", [p for p in problems if p.m * p.n * p.k <= low]),
             ("table", [p for p in problems if low < p.m * p.n * p.k <= high]),
             ("knobs", [p for p in problems if p.m * p.n * p.k > max(low, high)])]
    return [(mode, part) for mode, part in parts if part]


def write(args: argparse.Namespace, base: dict | None, entries: dict, runs: list[dict]) -> None:
    """The table (base entries overlaid with the tuned ones) and the results file."""
    device = torch.cuda.current_device()
    tune.merge_into(args.out, device, entries, base, name_run=True)
    args.results.parent.mkdir(parents=True, exist_ok=True)
    args.results.write_text(json.dumps({"environment": dict(env.header(sys.argv[1:]), command=" ".join(
        ["python", *sys.argv])), "margin": args.margin, "runs": runs, "seconds": round(sum(
            r["seconds"] for r in runs), 1), "entries": entries}, indent=1, sort_keys=True) + "\n")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python3 scripts/tune_grid.py", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", default="g1000,llm", help="comma-separated shape sets (g1000, llm)")
    parser.add_argument("--layouts", default="nn,nt")
    parser.add_argument("--dtypes", default="fp16,bf16")
    parser.add_argument("--sample", type=int, help="a stratified sample of this many shapes per set (quick runs)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--base", type=Path, help="the table whose kernels are candidates and whose "
                        "entries are kept for problems not tuned here (the committed table of this GPU)")
    parser.add_argument("--out", type=Path, help="the table to write")
    parser.add_argument("--results", type=Path, help="the results file to write")
    parser.add_argument("--margin", type=float, default=tune.DEFAULT_MARGIN)
    parser.add_argument("--sweeps", type=Path, nargs="*", default=[],
                        help="sweep results files (python -m search.sweep, .json or .json.gz) and search stores "
                             "(.sqlite, or .sqlite.gz), of this GPU or others: each problem's "
                             f"{SWEEP_TOP} fastest kernels that beat the cuBLASLt-autotune they were measured against "
                             "(per GPU) are timed too (a kernel the loaded library lacks is skipped)")
    parser.add_argument("--max-log2-mnk", type=float, help="tune only problems with log2(M*N*K) up to this (the base "
                        "table's entries are kept for the larger ones)")
    parser.add_argument("--min-log2-mnk", type=float, help="tune only problems with log2(M*N*K) above this (the base "
                        "table's entries are kept for the smaller ones; with --max-log2-mnk, a size band)")
    parser.add_argument("--missing-only", action="store_true", help="tune only problems the base table has no entry "
                        "for (to finish a tuning that a time budget cut)")
    parser.add_argument("--grid-up-to", type=float, help="problems with log2(M*N*K) up to this also time every loaded "
                        "kernel at each variant of its knob grid (tune's 'grid' mode; the others: the table's kernel "
                        "and the sweeps')")
    parser.add_argument("--knobs-from", type=float, help="problems with log2(M*N*K) above this time the table's and "
                        "the sweeps' kernels, and the kernels fastest on most measured problems of their size band, at "
                        "each variant of their knob grid too (tune's 'knobs' mode)")
    parser.add_argument("--merge", type=Path, nargs="+", help="tune nothing: write --out as --base overlaid with these "
                        "results files' entries in order (tunings of one base run in parallel lanes, e.g. one GPU per "
                        "dtype and layout) and --results as their runs together")
    parser.add_argument("--budget-s", type=float, help="start no problem after this many seconds (the results "
                        "file lists those left); problems run smallest first, but largest first in knobs mode")
    parser.add_argument("--sweep-problems-only", action="store_true", help="tune only problems for which a --sweeps "
                        "file measured a kernel faster than its cuBLASLt-autotune (and their other-dtype twins): a "
                        "search's finds checked against the base table's entries")
    parser.add_argument("--problems-from", type=Path, help="tune only the problems whose table keys this file lists, "
                        "one per line (e.g. python -m studies.table_drift --losses-out: the entries a benchmark's bar "
                        "beat with another configuration)")
    parser.add_argument("--missing-kernels", action="store_true", help="tune nothing: print the kernels --sweeps "
                        "would add that the extension's kernel set (tables and default set) lacks, one per line (to "
                        "build them beside it: scripts/gpu_check.sh new-kernels)")
    args = parser.parse_args(argv)
    if args.missing_kernels:
        built = set(select_kernel_names())
        print(*sorted({name for kernels in sweep_kernels(args.sweeps).values() for name, _ in kernels} - built),
              sep="\n")
        return 0
    if None in (args.base, args.out, args.results):
        parser.error("--base, --out and --results are required (unless --missing-kernels)")
    if not torch.cuda.is_available():
        print("tune_grid: needs a CUDA GPU", file=sys.stderr)
        return 2
    tune.disable_pdl()
    base = json.loads(args.base.read_text()) if args.base.exists() else None
    base_entries = (base or {}).get("entries", {})
    if args.merge:
        parts = [read_json(path) for path in args.merge]
        entries = {key: entry for part in parts for key, entry in part["entries"].items()}
        write(args, base, entries, [run for part in parts for run in part["runs"]])
        print(f"wrote {args.out}: {len(entries)} entries of {len(parts)} tunings over {args.base}")
        return 0
    extra = sweep_kernels(args.sweeps)
    listed = set(args.problems_from.read_text().split()) if args.problems_from else None
    winners = band_winners(args.sweeps) if args.knobs_from is not None else {}
    runs, entries = [], {}
    deadline = time.perf_counter() + args.budget_s if args.budget_s else None
    for shape_set in args.shapes.split(","):
        for dtype in args.dtypes.split(","):
            for layout in args.layouts.split(","):
                problems = sorted((p for p in problems_of(shape_set, layout, dtype, args.sample, args.seed)
                                   if wanted(p, args, base_entries, extra, listed)),
                                  key=lambda p: p.m * p.n * p.k)
                for mode, part in modes_of(problems, args.grid_up_to, args.knobs_from):
                    t0 = time.perf_counter()
                    if mode == "knobs":  # the largest first: where the knob variants gained most, if --budget-s cuts
                        part = part[::-1]
                    tuned, summary = tune.tune(part, base_entries, mode, args.margin, progress=False,
                                               deadline=deadline, extra_kernels=with_band_winners(
                                                   extra, part, winners) if mode == "knobs" else extra)
                    entries.update(tuned)
                    runs.append({"shapes": shapes.set_label(shape_set, args.sample), "layout": layout,
                                 "dtype": dtype, "kernels": mode, "problems": len(part),
                                 "seconds": round(time.perf_counter() - t0, 1), "summary": summary.lines(),
                                 "unsupported": summary.unsupported, "skipped": summary.skipped})
                    print(f"[{shape_set} {layout} {dtype} {mode}] " + " | ".join(summary.lines()), flush=True)
                    write(args, base, entries, runs)  # after each part: a run cut short keeps what it measured
    print(f"wrote {args.out} and {args.results}: {len(entries)} problems in "
          f"{sum(r['seconds'] for r in runs):.0f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
