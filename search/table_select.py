"""Table selection: from sweep measurements to `kernels/<arch_dir>/<gpu_slug>.json` (pure, CPU-tested).

A kernel enters the table for a problem only if it passed the correctness checks on that problem and beat the
cuBLASLt-autotune baseline measured in the same run by more than `margin` (so the dispatcher is never slower than
cuBLASLt beyond noise). Under a kernel budget (at most `kernel_budget` distinct kernels per layout and dtype of the
table's GPU; DEFAULT_KERNEL_BUDGET = 48 keeps a table's library near today's size), the kernels with the largest total
time saved are kept; the problems of the others fall back to cuBLASLt. The dispatch rule for shapes between grid
points (`nearest_m_up`: a miss takes the entry of the nearest larger tuned M with the same N, K) is switched on only
when measurements show it safe (see `nearest_m_up_holds`).
"""
from __future__ import annotations

import argparse
import gzip
import json
from collections import defaultdict
from pathlib import Path

from cudal2_ops.tables import SCHEMA_VERSION, arch_dir, entry_key, gpu_slug, parse_key
from search.codegen import write_if_changed

DEFAULT_MARGIN = 0.03
DEFAULT_KERNEL_BUDGET = 48


def best_candidate(row: dict, margin: float) -> dict | None:
    """The fastest correct candidate of one sweep row if it beats the baseline by more than `margin`, else None."""
    correct = [c for c in row["candidates"] if c.get("correct") and c.get("us")]
    if not correct or not row.get("baseline_us"):
        return None
    best = min(correct, key=lambda c: c["us"])
    return best if best["us"] < row["baseline_us"] * (1.0 - margin) else None


def select_entries(rows: list[dict], margin: float = DEFAULT_MARGIN,
                   kernel_budget: int = DEFAULT_KERNEL_BUDGET) -> dict[str, dict]:
    """Table entries (key -> entry) from sweep rows, restricted per (layout, dtype) to the `kernel_budget` kernels
    that save the most time in total."""
    winners = {}
    saved_us: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for row in rows:
        best = best_candidate(row, margin)
        if best is not None:
            winners[entry_key(row["layout"], row["dtype"], row["m"], row["n"], row["k"])] = (row, best)
            saved_us[row["layout"], row["dtype"]][best["kernel"]] += row["baseline_us"] - best["us"]
    kept = {group: set(sorted(saved, key=lambda name: -saved[name])[:kernel_budget])
            for group, saved in saved_us.items()}
    entries = {}
    for key, (row, best) in sorted(winners.items()):
        if best["kernel"] not in kept[row["layout"], row["dtype"]]:
            continue
        entries[key] = {"kernel": best["kernel"], "splits": best.get("splits", 0), "swizzle": best.get("swizzle", 0),
                        "raster": best.get("raster", 0), "kernel_us": round(best["us"], 3),
                        "baseline_us": round(row["baseline_us"], 3), "baseline": row.get("baseline", "cublaslt-autotune"),
                        "speedup": round(row["baseline_us"] / best["us"], 4), "provenance": best.get("provenance", "sweep")}
    return entries


def nearest_m_up_holds(rows: list[dict], entries: dict[str, dict], margin: float = DEFAULT_MARGIN,
                       min_pairs: int = 5) -> bool:
    """Whether the nearest-larger-M rule is safe by measurement: for every measured problem whose nearest larger
    tabled M (same layout, dtype, N, K) has an entry, that entry's kernel and knobs were measured on the problem too,
    correct and faster than its baseline by `margin`; at least `min_pairs` such problems must exist."""
    tabled: dict[tuple, list[int]] = defaultdict(list)
    for key in entries:
        layout, dtype, m, n, k = parse_key(key)
        tabled[layout, dtype, n, k].append(m)
    pairs = 0
    for row in rows:
        larger = [m for m in tabled.get((row["layout"], row["dtype"], row["n"], row["k"]), []) if m > row["m"]]
        if not larger:
            continue
        entry = entries[entry_key(row["layout"], row["dtype"], min(larger), row["n"], row["k"])]
        same = [c for c in row["candidates"] if c["kernel"] == entry["kernel"] and all(
            c.get(f, 0) == entry[f] for f in ("splits", "swizzle", "raster"))]
        if not same or not (same[0].get("correct") and same[0].get("us") and row.get("baseline_us")
                            and same[0]["us"] < row["baseline_us"] * (1.0 - margin)):
            return False
        pairs += 1
    return pairs >= min_pairs


def build_table(sweep: dict, margin: float = DEFAULT_MARGIN, kernel_budget: int = DEFAULT_KERNEL_BUDGET) -> dict:
    """The table document (header + entries) for the sweep's GPU."""
    env = sweep["environment"]
    header = {
        "schema_version": SCHEMA_VERSION,
        "gpu_name": env["gpu_name"],
        "sm_count": env["sm_count"],
        "capability": env["capability"],
        "cuda": env["cuda"],
        "driver": env.get("driver"),
        "cutlass": env.get("cutlass"),
        "package_version": env.get("package_version"),
        "search_run": sweep["run_id"],
        "timing_protocol": sweep["protocol"],
        "selection": {"margin": margin, "kernel_budget": kernel_budget, "rows": len(sweep["rows"])},
        "rules": {"nearest_m_up": False},
    }
    entries = select_entries(sweep["rows"], margin, kernel_budget)
    header["rules"]["nearest_m_up"] = nearest_m_up_holds(sweep["rows"], entries, margin)
    return {"header": header, "entries": entries}


def merge_sweeps(sweeps: list[dict]) -> dict:
    """One sweep from several of the same GPU (e.g. a full sweep and a later one of a few problems with new kernels):
    a problem's row comes from the last sweep that measured it."""
    first = sweeps[0]["environment"]
    for other in sweeps[1:]:
        env = other["environment"]
        if (env["gpu_name"], env["sm_count"]) != (first["gpu_name"], first["sm_count"]):
            raise ValueError(f"sweeps of different GPUs: {first['gpu_name']} and {env['gpu_name']}")
    rows = {}
    for sweep in sweeps:
        for row in sweep["rows"]:
            rows[(row["layout"], row["dtype"], row["m"], row["n"], row["k"])] = row
    protocols = {s["protocol"] for s in sweeps}
    protocol = sweeps[0]["protocol"] if len(protocols) == 1 else "; ".join(f"{s['run_id']}: {s['protocol']}"
                                                                           for s in sweeps)
    return {**sweeps[-1], "run_id": "+".join(s["run_id"] for s in sweeps), "protocol": protocol,
            "rows": list(rows.values())}


def read_sweep(path: Path) -> dict:
    """A sweep results file, plain JSON or gzip-compressed (.gz, as older sweeps are committed)."""
    return json.loads(gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_text())


def table_path(root: Path, env: dict) -> Path:
    """kernels/<arch_dir>/<gpu_slug>.json for the sweep's GPU."""
    return root / arch_dir(tuple(env["capability"])) / f"{gpu_slug(env['gpu_name'])}.json"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m search.table_select", description=__doc__)
    parser.add_argument("sweeps", type=Path, nargs="+",
                        help="sweep results files (python -m search.sweep; .json or .json.gz) of one GPU; later ones "
                             "win per problem")
    parser.add_argument("--root", type=Path, default=Path(__file__).resolve().parent.parent / "kernels")
    parser.add_argument("--margin", type=float, default=DEFAULT_MARGIN)
    parser.add_argument("--kernel-budget", type=int, default=DEFAULT_KERNEL_BUDGET,
                        help="most distinct kernels per (layout, dtype)")
    args = parser.parse_args(argv)
    sweep = merge_sweeps([read_sweep(path) for path in args.sweeps])
    table = build_table(sweep, args.margin, args.kernel_budget)
    path = table_path(args.root, sweep["environment"])
    write_if_changed(path, json.dumps(table, indent=1, sort_keys=True) + "\n")
    kernels = {e["kernel"] for e in table["entries"].values()}
    print(f"{path}: {len(table['entries'])} entries, {len(kernels)} kernels (of {len(sweep['rows'])} problems swept)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
