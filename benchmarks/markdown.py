"""Markdown rendering of a run's report: environment, the paper's Table 1 layout (offline and server speedups),
full aggregates per mode including the kernel mode, per-bucket breakdown, roofline efficiency, sanity check,
failures."""
from __future__ import annotations

from benchmarks.stats import BASELINES, BELOW, LOSS_BELOW, Comparison
from cudal2_testing.measure.shapes import BUCKET_LABELS
from cudal2_testing.measure.summary import markdown_table

HOST_MODES = ("offline", "server")
MAX_FAILURES_LISTED = 30


def _f(x: float | None, digits: int = 3) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def environment(header: dict, protocol: dict) -> list[str]:
    roof = header.get("roofline", {})
    smi = header.get("nvidia_smi", {})
    return [
        f"- GPU: {header['gpu']} ({header['sm_count']} SMs, L2 {header['l2_bytes'] / 2**20:.0f} MiB), "
        f"driver {smi.get('driver_version', '?')}, SM clock {smi.get('clocks.sm', '?')} "
        f"(max {smi.get('clocks.max.sm', '?')})" + (f", card {smi['uuid']}" if smi.get("uuid") else ""),
        f"- CUDA {header['cuda']}, torch {header['torch']}, cuBLAS {header['cublas']}, CUTLASS {header['cutlass']}, "
        f"package {header['package']}, commit {header['commit']}",
        f"- date {header['date']}, wall time {header.get('wall_s', 0):.0f} s, command: `{header['command']}`",
        f"- roofline: peak {_f(roof.get('peak_tflops'), 1)} TFLOP/s ({roof.get('peak_source')}), bandwidth "
        f"{_f(roof.get('bandwidth_gbs'), 0)} GB/s ({roof.get('bandwidth_source')})",
        f"- shapes {protocol['shapes']} ({protocol['n_shapes']}), L2 {protocol['l2']}, seed {protocol['seed']}; "
        f"unavailable: {', '.join(protocol.get('unavailable', {})) or 'none'}",
        f"- {dispatch_table_line(header)}; PDL {'off' if header.get('pdl_disabled') else 'on'}",
    ]


def dispatch_table_line(header: dict) -> str:
    """What the header says of the table cudal2's dispatcher loaded (files from before it was recorded: unknown)."""
    if "table" not in header:
        return "cudal2's table: not recorded"
    table = header["table"]
    if table is None:
        return "cudal2's table: none loaded (cuBLASLt's heuristic on every problem)"
    overlay = f", overlaid with {table['tuned_overlay']}" if table.get("tuned_overlay") else ""
    return f"cudal2's table: {table['path']} ({table['entries']} entries, digest {table['entries_sha256']}{overlay})"


def table1(comps: dict[str, Comparison]) -> list[str]:
    """The paper's Table 1: per baseline, mean / median / std / wins of speedups in offline and server modes."""
    modes = [m for m in HOST_MODES if m in comps]
    if not modes:
        return []
    head = ["baseline"] + [f"{m} {c}" for m in modes for c in ("mean", "median", "std", "wins")]
    body = []
    for b in BASELINES:
        aggs = [comps[m].summary(b) for m in modes]
        if any(a["n"] for a in aggs):
            body.append([b] + [v for a in aggs for v in (_f(a["mean"]), _f(a["median"]), _f(a["std"]),
                                                         f"{a['wins']}/{a['n']}")])
    return markdown_table(head, body)


def full(comp: Comparison) -> list[str]:
    """Every aggregate of one mode, with failure counts."""
    head = ["baseline", "n", "geomean", "mean", "median", "std", "min", "max", "wins", f"losses (<{LOSS_BELOW})",
            "failed rows"]
    body = []
    for b in BASELINES:
        a = comp.summary(b)
        if a["n"]:
            body.append([b, str(a["n"]), _f(a["geomean"]), _f(a["mean"]), _f(a["median"]), _f(a["std"]),
                         _f(a["min"]), _f(a["max"]), str(a["wins"]), str(a["losses"]),
                         str(comp.failures.get(b, 0))])
    return markdown_table(head, body)


def buckets(comp: Comparison) -> list[str]:
    """Geomean speedup (and count) per log2(MNK) bucket."""
    head = ["baseline"] + [f"log2 MNK {b}" for b in BUCKET_LABELS]
    body = []
    for b in BASELINES:
        per = comp.by_bucket(b)
        if any(a["n"] for a in per.values()):
            body.append([b] + [f"{_f(per[k]['geomean'])} ({per[k]['n']})" for k in BUCKET_LABELS])
    return markdown_table(head, body)


def roofline(effs: dict[tuple[str, str, str], dict]) -> list[str]:
    """% of roofline per implementation, layout and mode."""
    body = [[impl, layout, mode, _f(100 * e["median"], 1), _f(100 * e["geomean"], 1), str(e["n"])]
            for (impl, layout, mode), e in effs.items()]
    lines = markdown_table(["impl", "B layout", "mode", "median % of roofline", "geomean %", "n"], body)
    by_bucket = [[impl, layout, mode] + [_f(100 * e["by_bucket"][b], 1) if e["by_bucket"][b] is not None else "-"
                                         for b in BUCKET_LABELS] for (impl, layout, mode), e in effs.items()]
    return lines + ["", "Median % of roofline by log2(M*N*K) bucket (where the time goes: small problems sit at "
                        "the launch and latency floor, large ones near the peak):", ""] + \
        markdown_table(["impl", "B layout", "mode"] + [f"log2 MNK {b}" for b in BUCKET_LABELS], by_bucket)


def failures(rows: list[dict]) -> list[str]:
    """The failed rows (listed up to MAX_FAILURES_LISTED) and the kernel rows timed alone instead of in rounds with
    the shape's other implementations (their graph's capture ran out of memory beside the others)."""
    bad = [r for r in rows if not r["ok"]]
    lines = [f"{len(bad)} failed rows (excluded from every aggregate)."]
    lines += [f"- {r['impl']} {r['layout']} {r['dtype']} {r['mode']} M={r['m']} N={r['n']} K={r['k']}: {r['error']}"
              for r in bad[:MAX_FAILURES_LISTED]]
    alone = [r for r in rows if r.get("timed_alone")]
    if alone:
        lines += ["", f"{len(alone)} kernel rows timed alone, not in rounds with the shape's other implementations "
                      "(their capture ran out of memory beside the others' graphs; kept in the aggregates):"]
        lines += [f"- {r['impl']} {r['layout']} {r['dtype']} M={r['m']} N={r['n']} K={r['k']}" for r in alone]
    return lines


def render(doc: dict, comps: dict[tuple[str, str, str], Comparison], effs: dict, ours: str, stat: str) -> str:
    """The whole report; `comps` is keyed by (mode, layout, dtype)."""
    out = [f"# {doc['protocol']['shapes']}: {ours} vs baselines", ""] + environment(doc["header"], doc["protocol"])
    out += ["", f"Speedup = t_baseline / t_{ours} per shape from per-row {stat} times; -max = faster of NN and TN "
                f"per shape; wins > 1.00, losses < {LOSS_BELOW}."]
    for layout, dtype in sorted({(k[1], k[2]) for k in comps}):
        by_mode = {m: c for (m, la, dt), c in comps.items() if (la, dt) == (layout, dtype)}
        out += ["", f"## {layout.upper()} {dtype}"]
        t1 = table1(by_mode)
        if t1:
            out += ["", "### Table 1 (offline / server)", ""] + t1
        for mode, comp in sorted(by_mode.items()):
            sanity = comp.autotune_sanity()
            out += ["", f"### {mode} mode ({len(comp.ours)} shapes with a valid {ours} time, "
                        f"{comp.failures.get(ours, 0)} {ours} failures)", ""] + full(comp)
            out += ["", f"By log2(M*N*K) bucket ({mode}, geomean (n)):", ""] + buckets(comp)
            out += ["", f"Sanity ({mode}): geomean t(cublaslt-heuristic-max)/t(cublaslt-autotune-max) = "
                        f"{_f(sanity['geomean_heuristic_over_autotune'])} over {sanity['n']} shapes "
                        f"-> {'ok' if sanity['ok'] else 'CHECK' if sanity['ok'] is False else 'n/a'}"]
            noise = comp.noise_floor()
            if noise["n"]:
                out += ["", f"Noise floor ({mode}): the same-layout cuBLASLt-autotune selected and timed twice, "
                            f"geomean t(first)/t(repeat) = {_f(noise['geomean'])} over {noise['n']} shapes, "
                            f"{noise['below']} below {BELOW}; {ours} below {BELOW} of the same bar on those shapes: "
                            f"{noise['ours_below']}"]
            routes = comp.by_route()
            if routes:
                out += ["", f"By what {ours} ran ({mode}, against the same-layout cuBLASLt-autotune): " + "; ".join(
                    f"{route} {_f(a['geomean'])} over {a['n']} shapes, {a['below']} below {BELOW}"
                    for route, a in routes.items())]
    out += ["", "## Roofline efficiency", ""] + roofline(effs)
    out += ["", "## Failures", ""] + failures(doc["rows"])
    return "\n".join(out) + "\n"
