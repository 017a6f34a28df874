"""What a new table changed: kernel-mode benchmarks of the same problems with the old table and with the new one.

Both runs time cudal2 beside the same-layout cuBLASLt-autotune and its repeat (`python -m benchmarks.grid`, kernel
mode, as `scripts/gpu_check.sh bench-tuned` runs it with $TUNED_TABLE), on one machine one after the other. Across
runs only ratios to each run's own bar compare (the GPU's power state moves between runs), so per shape the report
gives cudal2's speedup over the bar in each run, and per dtype and layout their geomeans over every shape, over the
shapes whose entry changed (another kernel, knobs or cuBLASLt configuration) and over those whose chosen kernel or
knobs changed, with the bar's repeat as the noise floor of each.

    python -m studies.table_change --old-table OLD.json --new-table NEW.json --old-runs A.json ... \\
        --new-runs B.json ... --out change.md
"""
from __future__ import annotations

import argparse
import json
from pathlib import Path

from cudal2_ops.tables import entry_key
from cudal2_testing.measure.stored import read_json
from cudal2_testing.measure.summary import geomean, markdown_table
from studies.report_files import write_report
from studies.table_drift import BARS, shapes_of

CHOICE_FIELDS = ("kernel", "knobs", "cublaslt")


def speedups(runs: list[dict]) -> dict[str, tuple[float, float]]:
    """{entry key: (bar time / cudal2 time, bar time / bar repeat time)} of kernel-mode runs (a later run's shape
    replaces an earlier one's)."""
    found = {}
    for run in runs:
        for (layout, dtype, m, n, k), rows in shapes_of(run).items():
            bar = rows[BARS[layout]]["median_us"]
            repeat = rows.get(f"{BARS[layout]}-repeat", rows[BARS[layout]])["median_us"]
            found[entry_key(layout, dtype, m, n, k)] = (bar / rows["cudal2"]["median_us"], bar / repeat)
    return found


def changed(old: dict, new: dict, fields: tuple[str, ...]) -> bool:
    """Whether two table entries differ in any of `fields`."""
    return any(old.get(f) != new.get(f) for f in fields)


def report(old_entries: dict, new_entries: dict, old: dict, new: dict, sources: list[str]) -> tuple[list[str], dict]:
    """The report's lines and its JSON document."""
    keys = sorted(set(old) & set(new))
    groups = {"every shape": keys,
              "entry changed": [k for k in keys if changed(old_entries.get(k, {}), new_entries.get(k, {}),
                                                           CHOICE_FIELDS)],
              "kernel or knobs changed": [k for k in keys if changed(old_entries.get(k, {}), new_entries.get(k, {}),
                                                                     ("kernel", "knobs"))]}
    rows, doc = [], {"sources": sources, "cases": {}}
    for case in sorted({k.split("_")[0] + "_" + k.split("_")[1] for k in keys}):
        for label, group in groups.items():
            mine = [k for k in group if k.startswith(case + "_")]
            if not mine:
                continue
            figures = {"n": len(mine), "old": geomean(old[k][0] for k in mine),
                       "new": geomean(new[k][0] for k in mine),
                       "old_bar_repeat": geomean(old[k][1] for k in mine),
                       "new_bar_repeat": geomean(new[k][1] for k in mine)}
            doc["cases"].setdefault(case, {})[label] = figures
            rows.append([case, label, figures["n"], f"{figures['old']:.3f}", f"{figures['new']:.3f}",
                         f"{figures['new'] / figures['old']:.3f}",
                         f"{figures['old_bar_repeat']:.3f} / {figures['new_bar_repeat']:.3f}"])
    changes = [[k, old_entries.get(k, {}).get("kernel") or "cuBLASLt", new_entries[k].get("kernel") or "cuBLASLt",
                f"{old[k][0]:.3f}", f"{new[k][0]:.3f}"]
               for k in groups["kernel or knobs changed"]]
    lines = ["# What the new table changed", "", "Runs: " + ", ".join(f"`{s}`" for s in sources), "",
             "cudal2's geomean speedup over the same-layout cuBLASLt-autotune in each run (kernel mode); the bar "
             "against its own repeat is each run's noise floor.", "",
             *markdown_table(["dtype/layout", "shapes", "n", "old table", "new table", "new / old",
                              "bar / repeat (old / new run)"], rows),
             "", "## Shapes whose kernel or knobs changed", "",
             *markdown_table(["problem", "old", "new", "old run", "new run"], changes), ""]
    return lines, doc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.table_change", description=__doc__.split("\n\n")[0])
    parser.add_argument("--old-table", type=Path, required=True)
    parser.add_argument("--new-table", type=Path, required=True)
    parser.add_argument("--old-runs", type=Path, nargs="+", required=True, help="kernel-mode runs with the old table")
    parser.add_argument("--new-runs", type=Path, nargs="+", required=True, help="the same problems with the new one")
    parser.add_argument("--out", type=Path, required=True, help="markdown report; its JSON beside it")
    args = parser.parse_args(argv)
    entries = [json.loads(path.read_text())["entries"] for path in (args.old_table, args.new_table)]
    old, new = (speedups([read_json(p) for p in paths]) for paths in (args.old_runs, args.new_runs))
    write_report(args.out, *report(*entries, old, new, [str(p) for p in args.old_runs + args.new_runs]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
