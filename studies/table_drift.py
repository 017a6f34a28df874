"""Where the table loses to the bar: a benchmark's cudal2 times against the times its table's entries were tuned at.

For each shape of a kernel-mode benchmark (`python -m benchmarks.grid`, cudal2 and the same-layout cuBLASLt-autotune
with its repeat) whose table entry is a cuBLASLt configuration, two drifts since tuning: cudal2's time over the
entry's tuned time (`cublaslt_us`) and the bar's time over the baseline the tuner measured (`baseline_us`). Both near
1.00 mean the entry still ranks where it was tuned; cudal2 drifting while the bar does not means the entry's
configuration lost its rank among near-equal ones (another card, another power state) and the bar's fresh autotune
found a faster one. The report counts the shapes below 0.97 of the bar by that cause, per log2(MNK) bucket, and,
where the rows say what ran (`ran`, benchmarks since the tenth session), the losses on which cudal2 ran the very
configuration the bar chose (those are timing noise, not a choice), and the shapes whose bar picked one of the entry's
own choices (its configuration or a near-tie, `cublaslt_near`, which cudal2 times at the first eager call): where it
did not, no confirmation among them could have matched the bar.

    python -m studies.table_drift --table kernels/sm90/nvidia_h200.json --runs RUN.json.gz ... --out drift.md
"""
from __future__ import annotations

import argparse
import collections
import json
import statistics
from pathlib import Path

from benchmarks.stats import lt_config
from cudal2_ops.tables import cublaslt_fields, entry_key, near_tie_fields
from cudal2_testing.measure.shapes import BUCKET_LABELS, bucket_of
from cudal2_testing.measure.stored import read_json
from cudal2_testing.measure.summary import geomean, markdown_table
from studies.report_files import write_report

LOSS = 0.97    # below this fraction of the bar a shape counts as a loss (docs/EVALUATION.md)
DRIFT = 1.03   # a time more than 3% above the one measured at tuning counts as drifted
BARS = {"nn": "cublaslt-autotune-nn", "nt": "cublaslt-autotune-tn"}


def shapes_of(doc: dict) -> dict[tuple, dict[str, dict]]:
    """{(layout, dtype, m, n, k): {impl: its kernel-mode row}} of a run's valid rows: per layout of cudal2's rows,
    cudal2 and the bar of that layout with its repeat (a bar's name says its layout)."""
    found: dict[tuple, dict[str, dict]] = collections.defaultdict(dict)
    for r in doc["rows"]:
        if r["ok"] and r["mode"] == "kernel":
            name = f"cudal2@{r['layout']}" if r["impl"] == "cudal2" else r["impl"]
            found[(r["dtype"], r["m"], r["n"], r["k"])][name] = r
    out = {}
    for (dtype, m, n, k), by_impl in found.items():
        for layout, bar in BARS.items():
            if f"cudal2@{layout}" in by_impl and bar in by_impl:
                out[(layout, dtype, m, n, k)] = {"cudal2": by_impl[f"cudal2@{layout}"], bar: by_impl[bar]} | (
                    {f"{bar}-repeat": by_impl[f"{bar}-repeat"]} if f"{bar}-repeat" in by_impl else {})
    return out


def same_configuration(ours: dict, bar: dict) -> bool | None:
    """Whether cudal2 ran the bar's cuBLASLt configuration (the rows' `ran`, benchmarks.runner.ran_of); None where
    a row does not say."""
    mine, theirs = lt_config(ours.get("ran", {})), lt_config(bar.get("ran", {}))
    return None if mine is None or theirs is None else mine == theirs


def bar_choice(entry: dict, bar: dict) -> int | None:
    """Which of the entry's choices the bar ran: 0 its configuration, i its i-th near-tie, -1 none of them; None where
    the row does not say or the entry lists no near-ties (a table tuned before they were recorded)."""
    theirs = lt_config(bar.get("ran", {}))
    if theirs is None or not entry.get("cublaslt_near"):
        return None
    choices = [cublaslt_fields(entry), *near_tie_fields(entry)]
    return choices.index(theirs) if theirs in choices else -1


def kept_entry(ours: dict) -> bool | None:
    """Whether cudal2's first call kept the entry's own configuration (explain's `cublaslt_near_tie_pick` 0) rather
    than a near-tie; None where the row does not say (no near-ties, not yet timed, or a benchmark before the field)."""
    pick = ours.get("ran", {}).get("cublaslt_near_tie_pick")
    return None if pick is None or pick < 0 else pick == 0


def drift_rows(entries: dict, runs: list[dict]) -> list[dict]:
    """One record per shape and layout with a cuBLASLt entry and cudal2 and bar times."""
    rows = []
    for doc in runs:
        for (layout, dtype, m, n, k), found in shapes_of(doc).items():
            entry, bar = entries.get(entry_key(layout, dtype, m, n, k), {}), BARS[layout]
            if entry.get("kernel") or not entry.get("cublaslt_us"):
                continue
            us = {impl: row["median_us"] for impl, row in found.items()}
            rows.append({"shape": (m, n, k), "layout": layout, "dtype": dtype, "bucket": bucket_of((m, n, k)),
                         "vs_bar": us[bar] / us["cudal2"],
                         "bar_vs_repeat": us[bar] / us.get(f"{bar}-repeat", us[bar]),
                         "cudal2_drift": us["cudal2"] / entry["cublaslt_us"],
                         "bar_drift": us[bar] / entry["baseline_us"],
                         "same_configuration": same_configuration(found["cudal2"], found[bar]),
                         "bar_choice": bar_choice(entry, found[bar]), "kept_entry": kept_entry(found["cudal2"])})
    return rows


def confirmation_class(row: dict) -> str | None:
    """Which of the entry's choices cudal2 kept at its first call and which the bar picked: "the entry" / "a near-tie"
    for cudal2, and "the entry" / "the same near-tie" / "another near-tie" / "none of them" for the bar; None where
    the rows or the entry do not say."""
    kept, bar = row.get("kept_entry"), row.get("bar_choice")
    if kept is None or bar is None:
        return None
    ours = "the entry" if kept else "a near-tie"
    if bar == 0:
        return f"{ours} / the entry"
    if bar < 0:
        return f"{ours} / none of them"
    return f"{ours} / {'the same near-tie' if row['same_configuration'] else 'another near-tie'}"


def confirmation_summary(rows: list[dict]) -> dict[str, dict]:
    """{confirmation_class: shapes, geomean of cudal2 vs the bar, losses}, in a fixed order."""
    groups: dict[str, list[float]] = collections.defaultdict(list)
    for r in rows:
        key = confirmation_class(r)
        if key is not None:
            groups[key].append(r["vs_bar"])
    return {key: {"shapes": len(v), "geomean": geomean(v),
                  "losses": sum(x < LOSS for x in v)} for key, v in sorted(groups.items())}


def cause(row: dict) -> str:
    """Why a loss: the entry's configuration slowed more than the bar's pick, both slowed alike, or neither."""
    if row["cudal2_drift"] > DRIFT and row["bar_drift"] <= DRIFT:
        return "entry lost its rank"
    if row["cudal2_drift"] > DRIFT:
        return "both slower than at tuning"
    return "entry at its tuned time"


def report(rows: list[dict], sources: list[str], table_name: str = "") -> tuple[list[str], dict]:
    """Markdown lines and the JSON summary (`table_name`: the table the runs loaded, named in both)."""
    by_bucket = {b: [r for r in rows if r["bucket"] == b] for b in BUCKET_LABELS}
    summary = {}
    table = []
    for b, rs in by_bucket.items():
        if not rs:
            continue
        losses = [r for r in rs if r["vs_bar"] < LOSS]
        causes = collections.Counter(cause(r) for r in losses)
        noise = sum(not LOSS <= r["bar_vs_repeat"] <= 1 / LOSS for r in rs)
        same = [r["same_configuration"] for r in losses if r["same_configuration"] is not None]
        listed = [r["bar_choice"] >= 0 for r in rs if r["bar_choice"] is not None]
        listed_losses = [r["bar_choice"] >= 0 for r in losses if r["bar_choice"] is not None]
        summary[b] = {"shapes": len(rs), "cudal2_drift_median": statistics.median(r["cudal2_drift"] for r in rs),
                      "bar_drift_median": statistics.median(r["bar_drift"] for r in rs), "losses": len(losses),
                      "loss_causes": dict(causes), "bar_vs_repeat_outside_3pct": noise,
                      "losses_on_the_bars_configuration": sum(same) if same else None,
                      "bar_in_shortlist": [sum(listed), len(listed)] if listed else None,
                      "losses_bar_in_shortlist": [sum(listed_losses), len(listed_losses)] if listed_losses else None}
        s = summary[b]
        table.append([b, len(rs), f"{s['cudal2_drift_median']:.3f}", f"{s['bar_drift_median']:.3f}", len(losses),
                      causes["entry lost its rank"], causes["both slower than at tuning"],
                      causes["entry at its tuned time"], noise, f"{sum(same)} of {len(same)}" if same else "-",
                      f"{sum(listed)} of {len(listed)}" if listed else "-",
                      f"{sum(listed_losses)} of {len(listed_losses)}" if listed_losses else "-"])
    lines = ["# The table's cuBLASLt entries: drift since tuning, and the shapes below 0.97 of the bar", "",
             f"- Runs: {', '.join(f'`{s}`' for s in sources)}",
             *([f"- Table: `{table_name}`"] if table_name else []),
             f"- Drift: a time over the one the tuner measured for the entry (cudal2: the entry's `cublaslt_us`; the "
             f"bar: the entry's `baseline_us`); drifted = above {DRIFT:.2f}. Loss: cudal2 below {LOSS} of the "
             "same-layout cuBLASLt-autotune timed in the same run.", "",
             *markdown_table(["log2 MNK", "shapes", "cudal2 drift (median)", "bar drift (median)", "losses",
                              "entry lost its rank", "both slower", "entry at its tuned time",
                              "bar vs its repeat outside 3%", "losses on the bar's own configuration",
                              "bar's pick among the entry's choices", "same, losses"], table), ""]
    worst = sorted((r for r in rows if r["vs_bar"] < LOSS), key=lambda r: r["vs_bar"])[:15]
    lines += ["Worst losses:", "", *markdown_table(
        ["layout", "dtype", "M x N x K", "vs bar", "bar vs repeat", "cudal2 drift", "bar drift"],
        [[r["layout"], r["dtype"], "x".join(map(str, r["shape"])), f"{r['vs_bar']:.3f}", f"{r['bar_vs_repeat']:.3f}",
          f"{r['cudal2_drift']:.3f}", f"{r['bar_drift']:.3f}"] for r in worst]), ""]
    confirmation = confirmation_summary(rows)
    if confirmation:
        lines += ["The entry's near-ties timed at the first call: what cudal2 kept against what the bar picked (shapes "
                  "whose entry lists near-ties and whose rows say what ran):", "", *markdown_table(
                      ["cudal2 kept", "the bar picked", "shapes", "cudal2 vs bar (geomean)", "losses"],
                      [[*key.split(" / "), c["shapes"], f"{c['geomean']:.4f}", c["losses"]]
                       for key, c in confirmation.items()]), ""]
    return lines, {"sources": sources, "table": table_name, "loss": LOSS, "drift": DRIFT, "by_bucket": summary,
                   "confirmation": confirmation}


def loss_keys(rows: list[dict]) -> list[str]:
    """The table keys of the shapes below LOSS of the bar where cudal2 did not run the bar's own configuration (a
    loss on the same configuration is timing noise, which a re-tune would not mend), sorted."""
    return sorted({entry_key(r["layout"], r["dtype"], *r["shape"]) for r in rows
                   if r["vs_bar"] < LOSS and r["same_configuration"] is not True})


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.table_drift", description=__doc__.split("\n\n")[0])
    parser.add_argument("--table", type=Path, required=True, help="the table the runs loaded")
    parser.add_argument("--table-name", help="how the report names it (default: --table)")
    parser.add_argument("--runs", type=Path, nargs="+", required=True, help="kernel-mode results files (JSON or gzip)")
    parser.add_argument("--out", type=Path, required=True, help="markdown report; its JSON beside it")
    parser.add_argument("--losses-out", type=Path, help="also write the table keys of the losses that did not run the "
                        "bar's own configuration, one per line (to re-tune them on the GPU: scripts/tune_grid.py "
                        "--problems-from)")
    args = parser.parse_args(argv)
    entries = json.loads(args.table.read_text())["entries"]
    rows = drift_rows(entries, [read_json(p) for p in args.runs])
    write_report(args.out, *report(rows, [str(p) for p in args.runs], args.table_name or str(args.table)))
    if args.losses_out:
        args.losses_out.write_text("".join(f"{key}\n" for key in loss_keys(rows)))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
