"""`python -m search emit`: the store's measurements -> table rows -> `kernels/<arch_dir>/<gpu_slug>.json` (through
`search.table_select`), plus the generated source of every kernel the table names.

Config kernels are rendered by `search.codegen.write_kernel`; search-written sources are written to
`kernels/<arch_dir>/<source_name>.cu` as they are. One table per GPU the store's evaluations ran on. An existing
table of the same GPU (name and SM count) is merged: the search replaces the entries of the problems it measured
(a kernel, or cuBLASLt where nothing won) and keeps the others; the header's `kept_from` records the older source.
"""
from __future__ import annotations

import collections
import json
import statistics
from pathlib import Path

from cudal2_ops.tables import parse_key
from search.candidate import OK
from search.codegen import write_if_changed, write_kernel
from search.config import HgemmConfig
from search.store import Store
from search.table_select import DEFAULT_KERNEL_BUDGET, DEFAULT_MARGIN, build_table, table_path

PROTOCOL = "python -m search (kernel mode, cuBLASLt-autotune timed in the same process; median of test cases)"


def sweep_of(store: Store, run_id: str | None = None) -> list[dict]:
    """The store's OK evaluations as table_select sweeps, one per GPU: a row per problem (baseline: the median of the
    baselines measured with its candidates) with every measured candidate (fastest measurement per id)."""
    by_gpu: dict[str, dict[str, list]] = collections.defaultdict(lambda: collections.defaultdict(list))
    runs: dict[str, set[str]] = collections.defaultdict(set)
    envs = {}
    for row in store.evaluations(run_id):
        if row["status"] != OK:
            continue
        gpu = json.loads(row["gpu"])
        by_gpu[gpu["gpu_name"]][row["problem_key"]].append(row)
        runs[gpu["gpu_name"]].add(row["run_id"])
        envs[gpu["gpu_name"]] = gpu
    sweeps = []
    for gpu_name, problems in by_gpu.items():
        rows = []
        for key, evaluations in sorted(problems.items()):
            layout, dtype, m, n, k = parse_key(key)
            fastest: dict[str, dict] = {}
            for e in evaluations:
                cand = store.candidate(e["candidate_id"])
                splits, swizzle, raster = cand.knobs
                entry = {"kernel": cand.kernel_name, "splits": splits, "swizzle": swizzle, "raster": raster,
                         "us": e["us"], "correct": True, "provenance": e["provenance"],
                         "candidate_id": e["candidate_id"]}
                if e["candidate_id"] not in fastest or e["us"] < fastest[e["candidate_id"]]["us"]:
                    fastest[e["candidate_id"]] = entry
            rows.append({"layout": layout, "dtype": dtype, "m": m, "n": n, "k": k,
                         "baseline": "cublaslt-autotune",
                         "baseline_us": statistics.median(e["baseline_us"] for e in evaluations),
                         "candidates": list(fastest.values())})
        env = envs[gpu_name]
        env = {**env, "capability": env.get("capability") or [env["arch"] // 10, env["arch"] % 10]}
        sweeps.append({"environment": env, "run_id": "+".join(sorted(runs[gpu_name])), "protocol": PROTOCOL,
                       "rows": rows})
    return sweeps


def merge_into(existing: dict, table: dict, sweep: dict) -> dict:
    """`table` plus the entries of `existing` (same GPU) that the sweep gives no reason to drop: every entry of a
    problem the sweep did not measure, and the entry of a measured problem without a new winner unless the sweep timed
    that entry's own kernel and knobs there (a few candidates that all lose to cuBLASLt say nothing about an older
    winner they did not try). A table of another GPU (SM count differs) is replaced."""
    old, new = existing["header"], table["header"]
    if (old.get("gpu_name"), old.get("sm_count")) != (new["gpu_name"], new["sm_count"]):
        return table
    tried = {f"{r['layout']}_{r['dtype']}_{r['m']}_{r['n']}_{r['k']}":
             {(c["kernel"], c.get("splits", 0), c.get("swizzle", 0), c.get("raster", 0)) for c in r["candidates"]}
             for r in sweep["rows"]}
    kept = {key: entry for key, entry in existing["entries"].items() if key not in table["entries"] and
            (entry["kernel"], entry.get("splits", 0), entry.get("swizzle", 0), entry.get("raster", 0))
            not in tried.get(key, set())}
    header = {**new, "kept_from": {"search_run": old.get("search_run"), "entries": len(kept)}}
    header["rules"] = {"nearest_m_up": bool(new["rules"]["nearest_m_up"] and old.get("rules", {}).get(
        "nearest_m_up", False))}
    return {"header": header, "entries": dict(sorted({**kept, **table["entries"]}.items()))}


def emit(store: Store, root: Path, kernel_budget: int = DEFAULT_KERNEL_BUDGET, margin: float = DEFAULT_MARGIN,
         run_id: str | None = None) -> list[Path]:
    """Writes each GPU's table and its kernels' sources under `root`; the paths written (tables first)."""
    written = []
    for sweep in sweep_of(store, run_id):
        table = build_table(sweep, margin, kernel_budget)
        path = table_path(root, sweep["environment"])
        if path.exists():
            table = merge_into(json.loads(path.read_text()), table, sweep)
        write_if_changed(path, json.dumps(table, indent=1, sort_keys=True) + "\n")
        written.append(path)
        ids = {c["kernel"]: c["candidate_id"] for row in sweep["rows"] for c in row["candidates"]}
        for kernel in sorted({e["kernel"] for e in table["entries"].values()} & set(ids)):  # kept ones exist
            cand = store.candidate(ids[kernel])
            if cand.config:
                written.append(write_kernel(HgemmConfig.from_name(cand.config), root))
            else:
                source_path = path.parent / f"{cand.source_name}.cu"
                write_if_changed(source_path, cand.source)
                written.append(source_path)
    if not written:
        raise ValueError(f"{store.path}: no correct measured candidate to emit a table from")
    return written
