"""`python -m benchmarks.report <run.json>` (or `<run.json.gz>`): from a results file writes `<run>.csv` (one line
per row, with its roofline floor), `<run>.md` (Table 1 layout, aggregates per mode and bucket, roofline, sanity,
failures), `<run>_speedup_<mode>_<layout>_<dtype>.png` and `<run>_roofline_<mode>.png`, and merges the run's
aggregates into `summary.json` next to it. Every figure is computed from the measured rows."""
from __future__ import annotations

import argparse
import csv
import sys
from pathlib import Path

from benchmarks import markdown, plots, results, stats, summary

CSV_FIELDS = ("m", "n", "k", "dtype", "impl", "layout", "mode", "ok", "rel_err", "median_us", "mean_us", "std_us",
              "min_us", "samples", "calls_per_replay", "l2", "qps", "floor_us", "roofline_pct", "error")


def write_csv(rows: list[dict], roofline: dict, path: Path) -> None:
    """All rows, plus the roofline floor and % of roofline of the valid ones."""
    with open(path, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=CSV_FIELDS, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            floor = stats.roofline_floor_us(stats.shape_of(r), roofline["peak_tflops"], roofline["bandwidth_gbs"])
            extra = {"floor_us": floor, "roofline_pct": 100 * floor / r["median_us"] if r["ok"] else None}
            w.writerow(r | extra)


def comparisons(doc: dict, ours: str, stat: str) -> dict[tuple[str, str, str], stats.Comparison]:
    """One Comparison per (mode, layout, dtype) in which `ours` has rows."""
    return {g: stats.compare(doc["rows"], *g, ours=ours, stat=stat) for g in stats.groups(doc["rows"], ours)}


def make_report(path: Path, ours: str = "cudal2", stat: str = "median", plot: bool = True,
                update_summary: bool = True) -> list[Path]:
    """Writes every report file of the run at `path` (`.json` or `.json.gz`) beside it; returns the paths written."""
    doc = results.load(path)
    path = Path(path).with_suffix("") if Path(path).suffix == ".gz" else Path(path)   # the report files' stem
    header, roofline = doc["header"], doc["header"]["roofline"]
    comps = comparisons(doc, ours, stat)
    effs = stats.roofline_efficiency(doc["rows"], roofline, stat)
    written = [path.with_suffix(".csv"), path.with_suffix(".md")]
    write_csv(doc["rows"], roofline, written[0])
    written[1].write_text(markdown.render(doc, comps, effs, ours, stat))
    if plot:
        for (mode, layout, dtype), comp in comps.items():
            png = path.with_name(f"{path.stem}_speedup_{mode}_{layout}_{dtype}.png")
            title = f"{header['gpu']}: {ours} speedup, {mode} mode, {layout.upper()} {dtype}"
            written += [p for p in [plots.speedup_plot(comp, png, title)] if p]
        for mode in sorted({r["mode"] for r in doc["rows"]}):
            png = path.with_name(f"{path.stem}_roofline_{mode}.png")
            written += [p for p in [plots.roofline_plot(doc["rows"], roofline, mode, png,
                                                        f"{header['gpu']}: % of roofline, {mode} mode", stat)] if p]
    if update_summary and comps:
        entries = [summary.run_entry(c, doc["protocol"]["shapes"], header.get("wall_s", 0.0), path.name, ours)
                   for c in comps.values()]
        written.append(path.with_name("summary.json"))
        summary.update(written[-1], header, entries)
    return written


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m benchmarks.report", description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path, nargs="+", help="results file(s) written by benchmarks.grid")
    p.add_argument("--ours", default="cudal2", help="implementation treated as ours (default cudal2)")
    p.add_argument("--stat", choices=("median", "mean"), default="median", help="per-row time statistic")
    p.add_argument("--no-plots", action="store_true")
    p.add_argument("--no-summary", action="store_true", help="do not update summary.json")
    args = p.parse_args(argv)
    for run in args.run:
        for out in make_report(run, args.ours, args.stat, not args.no_plots, not args.no_summary):
            print(out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
