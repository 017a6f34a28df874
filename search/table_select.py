"""Table selection: from measurements to `kernels/<arch_dir>/<gpu_slug>.json` (pure, CPU-tested).

The input is one `Measured` per problem: the cuBLASLt-autotune baseline and every candidate kernel (with its knobs)
timed beside it in the same process, from a `python -m search.sweep` file (`from_sweep_rows`) or from a search store
(`search.emit.measurements`). A kernel enters the table for a problem only if it passed the correctness checks on
that problem and beat the baseline by more than `margin` (so the dispatcher is never slower than cuBLASLt beyond
noise). Under a kernel budget (at most `kernel_budget` distinct kernels per layout and dtype of the table's GPU;
DEFAULT_KERNEL_BUDGET = 48 keeps a table's library near today's size), the kernels with the largest total time saved
are kept; the problems of the others fall back to cuBLASLt. The dispatch rule for shapes between grid points
(`nearest_m_up`: a miss takes the entry of the nearest larger tuned M with the same N, K) is switched on only when
measurements show it safe (see `nearest_m_up_holds`).
"""
from __future__ import annotations

import argparse
import dataclasses
import json
from collections import defaultdict
from pathlib import Path

from cudal2_catalog.codegen import write_if_changed
from cudal2_catalog.config import Knobs
from cudal2_ops.tables import SCHEMA_VERSION, arch_dir, entry_key, gpu_slug, parse_key
from cudal2_testing.measure.stored import read_json

DEFAULT_MARGIN = 0.03
DEFAULT_KERNEL_BUDGET = 48


@dataclasses.dataclass(frozen=True)
class Timed:
    """One candidate kernel measured on one problem: `us` when it passed the checks and was timed."""

    kernel: str
    knobs: Knobs
    correct: bool
    us: float | None = None
    provenance: str = "sweep"


@dataclasses.dataclass(frozen=True)
class Measured:
    """One problem's measurements: its table key (`tables.entry_key`), the baseline's time and every candidate."""

    key: str
    baseline_us: float | None
    candidates: tuple[Timed, ...]
    baseline: str = "cublaslt-autotune"

    @property
    def problem(self) -> tuple[str, str, int, int, int]:
        """(layout, dtype, M, N, K)."""
        return parse_key(self.key)


def from_sweep_rows(rows: list[dict]) -> list[Measured]:
    """The measurements of `python -m search.sweep` rows (candidates {"kernel", "splits", "swizzle", "raster",
    "correct", "us"}; knobs left out are 0)."""
    return [Measured(entry_key(row["layout"], row["dtype"], row["m"], row["n"], row["k"]), row.get("baseline_us"),
                     tuple(Timed(c["kernel"], Knobs.from_dict(c), bool(c.get("correct")), c.get("us"),
                                 c.get("provenance", "sweep")) for c in row["candidates"]),
                     row.get("baseline", "cublaslt-autotune"))
            for row in rows]


def best_candidate(measured: Measured, margin: float) -> Timed | None:
    """The fastest correct candidate of one problem if it beats the baseline by more than `margin`, else None."""
    correct = [c for c in measured.candidates if c.correct and c.us]
    if not correct or not measured.baseline_us:
        return None
    best = min(correct, key=lambda c: c.us)
    return best if best.us < measured.baseline_us * (1.0 - margin) else None


def select_entries(measured: list[Measured], margin: float = DEFAULT_MARGIN,
                   kernel_budget: int = DEFAULT_KERNEL_BUDGET) -> dict[str, dict]:
    """Table entries (key -> entry) from measurements, restricted per (layout, dtype) to the `kernel_budget` kernels
    that save the most time in total."""
    winners = {}
    saved_us: dict[tuple[str, str], dict[str, float]] = defaultdict(lambda: defaultdict(float))
    for m in measured:
        best = best_candidate(m, margin)
        if best is not None:
            winners[m.key] = (m, best)
            saved_us[m.problem[:2]][best.kernel] += m.baseline_us - best.us
    kept = {group: set(sorted(saved, key=lambda name: -saved[name])[:kernel_budget])
            for group, saved in saved_us.items()}
    entries = {}
    for key, (m, best) in sorted(winners.items()):
        if best.kernel not in kept[m.problem[:2]]:
            continue
        entries[key] = {"kernel": best.kernel, **best.knobs.to_dict(), "kernel_us": round(best.us, 3),
                        "baseline_us": round(m.baseline_us, 3), "baseline": m.baseline,
                        "speedup": round(m.baseline_us / best.us, 4), "provenance": best.provenance}
    return entries


def nearest_m_up_holds(measured: list[Measured], entries: dict[str, dict], margin: float = DEFAULT_MARGIN,
                       min_pairs: int = 5) -> bool:
    """Whether the nearest-larger-M rule is safe by measurement: for every measured problem whose nearest larger
    tabled M (same layout, dtype, N, K) has an entry, that entry's kernel and knobs were measured on the problem too,
    correct and faster than its baseline by `margin`; at least `min_pairs` such problems must exist."""
    tabled: dict[tuple, list[int]] = defaultdict(list)
    for key in entries:
        layout, dtype, m, n, k = parse_key(key)
        tabled[layout, dtype, n, k].append(m)
    pairs = 0
    for meas in measured:
        layout, dtype, m, n, k = meas.problem
        larger = [tm for tm in tabled.get((layout, dtype, n, k), []) if tm > m]
        if not larger:
            continue
        entry = entries[entry_key(layout, dtype, min(larger), n, k)]
        same = [c for c in meas.candidates if c.kernel == entry["kernel"] and c.knobs == Knobs.from_dict(entry)]
        if not same or not (same[0].correct and same[0].us and meas.baseline_us
                            and same[0].us < meas.baseline_us * (1.0 - margin)):
            return False
        pairs += 1
    return pairs >= min_pairs


def build_table(measured: list[Measured], environment: dict, run_id: str, protocol: str,
                margin: float = DEFAULT_MARGIN, kernel_budget: int = DEFAULT_KERNEL_BUDGET) -> dict:
    """The table document (header + entries) for the GPU of `environment` (`kernel_timing.environment`'s facts),
    from measurements made by run(s) `run_id` under `protocol`."""
    header = {
        "schema_version": SCHEMA_VERSION,
        "gpu_name": environment["gpu_name"],
        "sm_count": environment["sm_count"],
        "capability": environment["capability"],
        "cuda": environment["cuda"],
        "driver": environment.get("driver"),
        "cutlass": environment.get("cutlass"),
        "package_version": environment.get("package_version"),
        "search_run": run_id,
        "timing_protocol": protocol,
        "selection": {"margin": margin, "kernel_budget": kernel_budget, "rows": len(measured)},
        "rules": {"nearest_m_up": False},
    }
    entries = select_entries(measured, margin, kernel_budget)
    header["rules"]["nearest_m_up"] = nearest_m_up_holds(measured, entries, margin)
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
    return read_json(path)


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
    table = build_table(from_sweep_rows(sweep["rows"]), sweep["environment"], sweep["run_id"], sweep["protocol"],
                        args.margin, args.kernel_budget)
    path = table_path(args.root, sweep["environment"])
    write_if_changed(path, json.dumps(table, indent=1, sort_keys=True) + "\n")
    kernels = {e["kernel"] for e in table["entries"].values()}
    print(f"{path}: {len(table['entries'])} entries, {len(kernels)} kernels (of {len(sweep['rows'])} problems swept)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
