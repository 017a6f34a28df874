"""`benchmarks/results/<gpu_slug>/summary.json`: the headline aggregates of the latest run per (mode, layout, dtype,
shape set), computed from measured rows only. Schema:
{"gpu", "commit", "date", "runs": [{"mode", "layout", "dtype", "shapes", "n", "wall_s", "source",
  "vs": {baseline: {"geomean", "mean", "median", "min", "max", "wins", "losses"}}, "failures", "sanity",
  "noise_floor": {"n", "geomean", "below", "ours_below"}}]}"""
from __future__ import annotations

import json
from pathlib import Path

from benchmarks.stats import BASELINES, Comparison

VS_FIELDS = ("geomean", "mean", "median", "min", "max", "wins", "losses")


def run_entry(comp: Comparison, shapes_label: str, wall_s: float, source: str, ours: str = "cudal2") -> dict:
    """One summary run entry: `n` = shapes where ours is valid; `vs` has every baseline with at least one
    comparable shape; `failures` counts failed rows per implementation."""
    vs = {}
    for baseline in BASELINES:
        agg = comp.summary(baseline)
        if agg["n"]:
            vs[baseline] = {k: agg[k] for k in VS_FIELDS}
    return {"mode": comp.mode, "layout": comp.layout, "dtype": comp.dtype, "shapes": shapes_label,
            "n": len(comp.ours), "wall_s": round(wall_s, 1), "source": source, "vs": vs,
            "failures": dict(sorted(comp.failures.items())), "sanity": comp.autotune_sanity(),
            "noise_floor": comp.noise_floor(), "ours": ours}


def _key(entry: dict) -> tuple:
    return entry["mode"], entry["layout"], entry["dtype"], entry["shapes"], entry.get("ours", "cudal2")


def update(path: Path, header: dict, entries: list[dict]) -> dict:
    """Merges `entries` into the summary at `path` (an entry replaces the one with the same mode, layout, dtype,
    shape set and ours) and writes it; returns the new summary."""
    path = Path(path)
    old = json.loads(path.read_text()) if path.exists() else {"runs": []}
    keys = {_key(e) for e in entries}
    runs = [r for r in old["runs"] if _key(r) not in keys] + entries
    runs.sort(key=lambda e: (e["shapes"], e["dtype"], e["layout"], e["mode"]))
    new = {"gpu": header["gpu"], "commit": header["commit"], "date": header["date"], "runs": runs}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(new, indent=1) + "\n")
    return new
