"""`python -m search emit`: the store's measurements -> table entries -> `kernels/<arch_dir>/<gpu_slug>.json` (through
`search.table_select`), plus the generated source of every kernel the table names.

Config kernels are rendered by `cudal2_catalog.codegen.write_kernel`; search-written sources are written to
`kernels/<arch_dir>/<source_name>.cu` as they are. One table per GPU the store's evaluations ran on. An existing
table of the same GPU (name and SM count) is merged: the search replaces the entries of the problems it measured
(a kernel, or cuBLASLt where nothing won) and keeps the others; the header's `kept_from` records the older source.
"""
from __future__ import annotations

import collections
import dataclasses
import json
import statistics
from pathlib import Path

from cudal2_catalog.codegen import write_if_changed, write_kernel
from cudal2_catalog.config import HgemmConfig, Knobs
from search.candidate import OK
from search.store import Store
from search.table_select import (DEFAULT_KERNEL_BUDGET, DEFAULT_MARGIN, Measured, Timed, build_table,
                                 table_path)

PROTOCOL = "python -m search (kernel mode, cuBLASLt-autotune timed in the same process; median of test cases)"


@dataclasses.dataclass
class GpuMeasurements:
    """A store's OK evaluations made on one GPU: its environment (`kernel_timing.environment`'s facts), the runs they
    came from, one `Measured` per problem, and for each kernel measured the id of a candidate that ran it."""

    environment: dict
    run_id: str
    measured: list[Measured]
    candidate_ids: dict[str, str]


def measurements(store: Store, run_id: str | None = None) -> list[GpuMeasurements]:
    """The store's OK evaluations (of one run, or all), one GpuMeasurements per GPU: per problem the median of the
    baselines measured with its candidates, and each candidate at its fastest measurement."""
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
    out = []
    for gpu_name, problems in by_gpu.items():
        measured, ids = [], {}
        for key, evaluations in sorted(problems.items()):
            fastest: dict[str, Timed] = {}
            for e in evaluations:
                cand = store.candidate(e["candidate_id"])
                timed = Timed(cand.kernel_name, Knobs(*cand.knobs), True, e["us"], e["provenance"])
                if e["candidate_id"] not in fastest or timed.us < fastest[e["candidate_id"]].us:
                    fastest[e["candidate_id"]] = timed
                ids[cand.kernel_name] = e["candidate_id"]
            measured.append(Measured(key, statistics.median(e["baseline_us"] for e in evaluations),
                                     tuple(fastest.values())))
        env = envs[gpu_name]
        env = {**env, "capability": env.get("capability") or [env["arch"] // 10, env["arch"] % 10]}
        out.append(GpuMeasurements(env, "+".join(sorted(runs[gpu_name])), measured, ids))
    return out


def merge_into(existing: dict, table: dict, measured: list[Measured]) -> dict:
    """`table` plus the entries of `existing` (same GPU) that the measurements give no reason to drop: every entry of
    a problem not measured, and the entry of a measured problem without a new winner unless that entry's own kernel
    and knobs were measured there (a few candidates that all lose to cuBLASLt say nothing about an older winner they
    did not try; an entry naming a cuBLASLt configuration is never measured by the search, so it stays). A table of
    another GPU (SM count differs) is replaced."""
    old, new = existing["header"], table["header"]
    if (old.get("gpu_name"), old.get("sm_count")) != (new["gpu_name"], new["sm_count"]):
        return table
    tried = {m.key: {(c.kernel, c.knobs) for c in m.candidates} for m in measured}
    kept = {key: entry for key, entry in existing["entries"].items() if key not in table["entries"] and
            (entry.get("kernel"), Knobs.from_dict(entry)) not in tried.get(key, set())}
    header = {**new, "kept_from": {"search_run": old.get("search_run"), "entries": len(kept)}}
    # The kernel rule holds only if it held for both; the older table's other rules (the cuBLASLt configurations'
    # off-grid rule, validated on those configurations, which are kept) stay as they were.
    header["rules"] = {**old.get("rules", {}), "nearest_m_up": bool(new["rules"]["nearest_m_up"] and old.get(
        "rules", {}).get("nearest_m_up", False))}
    return {"header": header, "entries": dict(sorted({**kept, **table["entries"]}.items()))}


def emit(store: Store, root: Path, kernel_budget: int = DEFAULT_KERNEL_BUDGET, margin: float = DEFAULT_MARGIN,
         run_id: str | None = None) -> list[Path]:
    """Writes each GPU's table and its kernels' sources under `root`; the paths written (tables first)."""
    written = []
    for gpu in measurements(store, run_id):
        table = build_table(gpu.measured, gpu.environment, gpu.run_id, PROTOCOL, margin, kernel_budget)
        path = table_path(root, gpu.environment)
        if path.exists():
            table = merge_into(json.loads(path.read_text()), table, gpu.measured)
        write_if_changed(path, json.dumps(table, indent=1, sort_keys=True) + "\n")
        written.append(path)
        for kernel in sorted({e.get("kernel") for e in table["entries"].values()} & set(gpu.candidate_ids)):
            cand = store.candidate(gpu.candidate_ids[kernel])  # kept entries' kernels exist already
            if cand.config:
                written.append(write_kernel(HgemmConfig.from_name(cand.config), root))
            else:
                source_path = path.parent / f"{cand.source_name}.cu"
                write_if_changed(source_path, cand.source)
                written.append(source_path)
    if not written:
        raise ValueError(f"{store.path}: no correct measured candidate to emit a table from")
    return written
