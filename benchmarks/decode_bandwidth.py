"""The decode family's share of HBM bandwidth on LLM decode shapes (M <= 64), with cold weights.

Problems: the LLM shapes (cudal2_testing/measure/shapes.py) with M <= 64 in the NT layout (nn.Linear weight [N, K]),
per dtype.
Peak: a 2 GiB device-to-device copy in the same run, (read + write bytes) / best of 20 CUDA-event times (eager: in a
CUDA graph the copy runs on the copy engines, which are slower); every % is of that measured figure, and a
read-mostly GEMM can exceed it slightly. Cold weights: each problem rotates over input sets (activation, weight,
output) totalling more than 4x the L2, so no call finds its weight in L2; bytes per call = (M*K + N*K + M*N) * 2.
Candidates: cudal2 as a user's call runs it (`_C.linear_out`: the dispatcher with the installed table, whatever it
picks; the library's own figure), cuBLASLt with its top heuristic algorithm and autotuned
(`_C.testing.cublaslt_matmul`; autotune tunes on the first call), and every loaded decode kernel of the dtype and
layout at splits 0 (the kernel's own choice), 1, 2, 4, 8 and 16 (values the kernel rejects are skipped). Each
candidate first runs once on set 0 with a NaN-poisoned output against the fp32 reference (relative Frobenius error
<= 1e-3 fp16 / 8e-3 bf16); an incorrect one is recorded and not timed. Timing is kernel mode
(cudal2_testing/measure/timing.py: CUDA-graph replay of R calls rotating over the sets, median per call). Shapes are
visited in an order whose every prefix is spread over the list, so a run cut by `--budget-s` (recorded as
`complete: false`) still samples every size.

    python -m benchmarks.decode_bandwidth --out OUT/decode_bandwidth.json [--dtypes fp16,bf16] [--max-shapes 20]
        [--budget-s 150] [--min-nk 16777216] [--kernels 'decode_*_8x*']     # also writes OUT/decode_bandwidth.md
    python -m benchmarks.decode_bandwidth --render RESULTS.json.gz     # the report of a stored run, again (no GPU)
"""
from __future__ import annotations

import argparse
import fnmatch
import json
import math
import statistics
import sys
import time
from pathlib import Path

import torch

from cudal2_catalog.config import HgemmConfig, Knobs
from cudal2_ops._extension import _C
from cudal2_ops.tune import runnable_kernels
from cudal2_testing.correctness.reference import DTYPES, REL_TOL, error_stats, reference
from cudal2_testing.kernel_timing import kernel_impl
from cudal2_testing.measure import env, shapes, timing
from cudal2_testing.measure.stored import read_json
from cudal2_testing.measure.summary import geomean, markdown_table
from cudal2_testing.measure.cold_l2 import COLD_FACTOR, bytes_per_call, cold_set_count, l2_bytes

LAYOUT = "nt"
MAX_M = 64
SPLITS = (0, 1, 2, 4, 8, 16)
COPY_BYTES = 2 * 2**30           # the peak-bandwidth copy (each of source and destination)
COPY_WARMUP, COPY_REPS = 20, 20
SMALL_NK = 16 * 2**20            # the "N*K <= 16M" subset
SUBSETS = ("all", "nk_le_16m")
IMPLS = ("cudal2", "decode", "cublaslt_autotune", "cublaslt_heuristic")
# (name, subset, statistic, threshold %) of the targets, judged for the decode family and for cudal2 as shipped
TARGETS = (("median % of bandwidth, all problems", "all", "median", 85.0),
           ("min % of bandwidth, N*K <= 16M", "nk_le_16m", "min", 50.0))
TARGET_IMPLS = ("decode", "cudal2")


def pct_of_bandwidth(nbytes: int, us: float, bandwidth_gbs: float) -> float:
    """Percent of `bandwidth_gbs` (GB/s, 1e9 bytes) reached by moving `nbytes` in `us` microseconds."""
    return 100.0 * nbytes / (us * 1e-6) / (bandwidth_gbs * 1e9)


def spread(items: list, count: int | None) -> list:
    """`count` items evenly spread over `items` (the middle of each of `count` equal slices); all when None or
    `count` >= len(items)."""
    if count is None or count >= len(items):
        return list(items)
    return [items[int((i + 0.5) * len(items) / count)] for i in range(count)]


def spread_order(n: int) -> list[int]:
    """0..n-1 in bit-reversed order: every prefix is spread over the range (0, n/2, n/4, 3n/4, ...)."""
    width = max(1, (n - 1).bit_length())
    return sorted(range(n), key=lambda i: int(f"{i:0{width}b}"[::-1], 2))


def problems(dtypes: list[str], max_shapes: int | None, min_nk: int = 0) -> list[tuple[int, int, int, str]]:
    """(M, N, K, dtype) of the LLM shapes with M <= MAX_M and N*K >= min_nk (spread to `max_shapes`), in spread
    order, each shape's dtypes together."""
    chosen = spread([s for s in shapes.llm() if s[0] <= MAX_M and s[1] * s[2] >= min_nk], max_shapes)
    return [(*chosen[i], dtype) for i in spread_order(len(chosen)) for dtype in dtypes]


def fastest(candidates: list[dict]) -> dict | None:
    """The correct timed candidate with the smallest time, or None."""
    timed = [c for c in candidates if c["correct"] and c.get("us") is not None]
    return min(timed, key=lambda c: c["us"]) if timed else None


def impl_pct(row: dict, impl: str) -> float | None:
    """% of bandwidth of `impl` ("decode": the best decode config; "cudal2": the dispatcher as shipped;
    "cublaslt_<policy>") on a row, None if untimed (or not measured: runs before cudal2 was a candidate)."""
    if impl == "decode":
        cand = row["best"]
    elif impl == "cudal2":
        cand = row.get("cudal2")
    else:
        cand = row["cublaslt"][impl.split("_", 1)[1]]
    return cand.get("pct") if cand else None


def in_subset(row: dict, subset: str) -> bool:
    """Whether a row belongs to `subset` ("all" or "nk_le_16m")."""
    return subset == "all" or row["n"] * row["k"] <= SMALL_NK


def stats(values: list[float | None]) -> dict:
    """n (timed), missing (untimed: None), median and min of percentages (None when nothing was timed)."""
    timed = [v for v in values if v is not None]
    return {"n": len(timed), "missing": len(values) - len(timed),
            "median": statistics.median(timed) if timed else None, "min": min(timed) if timed else None}


def head_to_head(rows: list[dict]) -> dict:
    """Problems where both the best decode config and cuBLASLt-autotune were timed: how many, how many decode won,
    and the geomean of cuBLASLt-autotune time / decode time."""
    ratios = [r["speedup_vs_autotune"] for r in rows if r["speedup_vs_autotune"] is not None]
    return {"compared": len(ratios), "decode_wins": sum(x > 1.0 for x in ratios),
            "geomean_speedup": geomean(ratios) if ratios else None}


def verdicts(summary: dict) -> list[dict]:
    """The issue's targets for the decode family and for cudal2 as shipped, each with its value and whether it is
    met; a problem without a correct timing in the target's subset fails it (an implementation no row measured is
    left out)."""
    out = []
    for impl in TARGET_IMPLS:
        for name, subset, stat, threshold in TARGETS:
            s = summary[impl][subset]
            if s["n"] == 0 and impl != "decode":
                continue
            value = s[stat]
            out.append({"impl": impl, "target": f"{name} >= {threshold:g}%", "value": value, "threshold": threshold,
                        "met": value is not None and s["missing"] == 0 and value >= threshold})
    return out


def weight_stream(kernel: str) -> str:
    """The weight stream of a decode kernel by its name (cudal2_catalog's `weight_stream`; "cp.async" for the
    default)."""
    return HgemmConfig.from_name(kernel).weight_stream or "cp.async"


def by_weight_stream(rows: list[dict]) -> dict[str, dict[str, dict]]:
    """{stream: {subset: stats}} of the best correct decode config per row among the kernels of each weight stream
    (what each stream alone reaches; the library's kernels and any loaded candidates), from the rows' candidates."""
    streams = sorted({weight_stream(c["kernel"]) for r in rows for c in r["decode"]})
    return {stream: {subset: stats([stream_pct(r, stream) for r in rows if in_subset(r, subset)]) for subset in SUBSETS}
            for stream in streams}


def stream_pct(row: dict, stream: str) -> float | None:
    """% of bandwidth of the fastest correct decode config of `row` whose kernel uses weight stream `stream`."""
    best = fastest([c for c in row["decode"] if weight_stream(c["kernel"]) == stream])
    return best["pct"] if best else None


def summarize(rows: list[dict]) -> dict:
    """Median and min % of bandwidth per implementation and subset, decode vs cuBLASLt-autotune, target verdicts."""
    summary = {impl: {subset: stats([impl_pct(r, impl) for r in rows if in_subset(r, subset)])
                      for subset in SUBSETS} for impl in IMPLS}
    summary["problems"] = {subset: sum(in_subset(r, subset) for r in rows) for subset in SUBSETS}
    summary["vs_cublaslt_autotune"] = head_to_head(rows)
    summary["targets"] = verdicts(summary)
    return summary


def _f(x: float | None, digits: int = 1) -> str:
    return "-" if x is None else f"{x:.{digits}f}"


def _us_pct(cand: dict | None) -> list[str]:
    if not cand or cand.get("us") is None:
        return ["-", "-"]
    return [_f(cand["us"], 2), _f(cand["pct"])]


def render_markdown(doc: dict) -> str:
    """A short report: environment, measured bandwidth, summary, targets, one line per problem."""
    e, s, bw = doc["environment"], doc["summary"], doc["bandwidth"]
    lines = [f"# Decode family: % of HBM bandwidth ({e['gpu']})", "",
             f"- commit {e['commit']}, date {e['date']}, CUDA {e['cuda']}, torch {e['torch']}, cuBLAS {e['cublas']}",
             f"- command: `{e['command']}`; wall time {doc['wall_s']:.0f} s of budget {doc['budget_s']:g} s; "
             f"complete: {str(doc['complete']).lower()}",
             f"- measured bandwidth {bw['gbs']:.0f} GB/s ({bw['source']}); every % is of this figure",
             f"- {doc['protocol']['cold']}", "", "## Summary", ""]
    body = [[impl, subset, f"{st['n']}", f"{st['missing']}", _f(st["median"]), _f(st["min"])]
            for impl in IMPLS if impl in s for subset, st in s[impl].items()]
    lines += markdown_table(["impl", "problems", "timed", "untimed", "median %", "min %"], body)
    h = s["vs_cublaslt_autotune"]
    lines += ["", f"Decode beats cuBLASLt-autotune on {h['decode_wins']} of {h['compared']} problems "
                  f"(geomean speedup {_f(h['geomean_speedup'], 3)})."]
    streams = by_weight_stream(doc["rows"])
    if len(streams) > 1:
        lines += ["", "By weight stream (the best decode config of each stream alone, per problem):", ""]
        lines += markdown_table(["weight stream", "problems", "timed", "untimed", "median %", "min %"],
                                [[stream, subset, f"{st['n']}", f"{st['missing']}", _f(st["median"]), _f(st["min"])]
                                 for stream, by_subset in streams.items() for subset, st in by_subset.items()])
    lines += ["", "## Targets (the decode family's best config; cudal2 as shipped)", ""]
    lines += [f"- {t.get('impl', 'decode')}: {t['target']}: {_f(t['value'])}% -> {'met' if t['met'] else 'not met'}"
              for t in s["targets"]]
    if not doc["complete"]:
        lines.append("- partial run (budget spent): the verdicts cover the problems measured")
    lines += ["", "## Problems", ""]
    body = []
    for r in sorted(doc["rows"], key=lambda r: (r["dtype"], r["n"], r["k"], r["m"])):
        best = r["best"] or {}
        body.append([r["dtype"], f"{r['m']}", f"{r['n']}", f"{r['k']}", *_us_pct(r.get("cudal2")),
                     best.get("kernel", "-"), f"{best.get('splits', '-')}", *_us_pct(best),
                     *_us_pct(r["cublaslt"]["heuristic"]), *_us_pct(r["cublaslt"]["autotune"]),
                     _f(r["speedup_vs_autotune"], 3)])
    lines += markdown_table(["dtype", "M", "N", "K", "cudal2 us", "%", "decode kernel", "splits", "us", "%",
                             "lt-heur us", "%", "lt-auto us", "%", "auto/decode"], body)
    return "\n".join(lines) + "\n"


def copy_times_us(nbytes: int, reps: int = COPY_REPS) -> list[float]:
    """CUDA-event times (us) of `reps` eager device-to-device copies of `nbytes`, after a warm-up that ramps the
    clocks. Eager, not kernel mode: a copy captured in a CUDA graph becomes a memcpy node that runs on the copy
    engines (about 2.8 TB/s on an H200, against 4.3 TB/s for the eager copy kernel)."""
    src = torch.empty(nbytes, dtype=torch.uint8, device="cuda").fill_(1)
    dst = torch.empty_like(src)
    for _ in range(COPY_WARMUP):
        dst.copy_(src)
    events = [(torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)) for _ in range(reps)]
    for start, end in events:
        start.record()
        dst.copy_(src)
        end.record()
    torch.cuda.synchronize()
    return [start.elapsed_time(end) * 1e3 for start, end in events]


def copy_bandwidth(nbytes: int = COPY_BYTES) -> dict:
    """Achievable copy bandwidth (GB/s): (read + write) bytes of an `nbytes` device-to-device copy over its best
    time (and over the median time)."""
    times = copy_times_us(nbytes)
    torch.cuda.empty_cache()  # the copy's buffers are gone with copy_times_us' frame
    return {"gbs": 2 * nbytes / (min(times) * 1e3), "median_gbs": 2 * nbytes / (statistics.median(times) * 1e3),
            "source": f"eager device-to-device copy of {nbytes / 2**30:g} GiB, (read + write) / best of "
                      f"{len(times)} CUDA-event times, this run"}


def decode_kernels(dtype: str, patterns: list[str] | None = None) -> list[str]:
    """Loaded decode-family kernels of `dtype`, the NT layout and this GPU's compute capability (only names matching
    one of the fnmatch `patterns`, when given)."""
    return [name for name in runnable_kernels(LAYOUT, dtype, "decode")
            if patterns is None or any(fnmatch.fnmatchcase(name, p) for p in patterns)]


def make_sets(m: int, n: int, k: int, dtype: str, count: int, gen: torch.Generator) -> list[tuple]:
    """`count` distinct (a [M, K], w [N, K], out [M, N]) sets of randn inputs."""
    t = DTYPES[dtype]
    return [(torch.randn(m, k, device="cuda", dtype=t, generator=gen),
             torch.randn(n, k, device="cuda", dtype=t, generator=gen),
             torch.empty(m, n, device="cuda", dtype=t)) for _ in range(count)]


def measure(call, sets: list[tuple], ref: torch.Tensor, tol: float, nbytes: int, bandwidth_gbs: float) -> dict | None:
    """One candidate `call(i)` (runs on set i): checked on set 0, then timed over all sets if correct. None when it
    raises RuntimeError on set 0 (the candidate rejects the problem)."""
    out = sets[0][2]
    out.fill_(float("nan"))
    try:
        call(0)
    except RuntimeError:
        return None
    err = error_stats(out, ref).rel_err
    cand = {"err": err if math.isfinite(err) else None, "correct": err <= tol}
    if cand["correct"]:
        res = timing.kernel_mode(call, len(sets), timing.estimate_ms(call, len(sets)))
        cand |= {"us": res["median_us"], "min_us": res["min_us"], "calls_per_replay": res["calls_per_replay"],
                 "pct": pct_of_bandwidth(nbytes, res["median_us"], bandwidth_gbs)}
    return cand


def lt_call(sets: list[tuple], policy: str):
    """call(i): cuBLASLt with `policy` on set i."""
    return lambda i: _C.testing.cublaslt_matmul(sets[i][0], sets[i][1], None, sets[i][2], LAYOUT, policy)


def cudal2_call(sets: list[tuple]):
    """call(i): cudal2's linear (the dispatcher and its table, as a user's call runs it) on set i, into its output."""
    return lambda i: _C.linear_out(sets[i][0], sets[i][1], None, out=sets[i][2])


def kernel_call(sets: list[tuple], name: str, splits: int):
    """call(i): decode kernel `name` with `splits` on set i."""
    impl = kernel_impl(name, LAYOUT, Knobs(splits=splits))
    return lambda i: impl(sets[i][0], sets[i][1], None, sets[i][2])


def measure_problem(m: int, n: int, k: int, dtype: str, kernels: list[str], l2: int, bandwidth_gbs: float,
                    gen: torch.Generator) -> dict:
    """cudal2 as shipped, cuBLASLt (heuristic, autotune) and every decode kernel x splits on one problem with cold
    weights."""
    nbytes = bytes_per_call(m, n, k)
    sets = make_sets(m, n, k, dtype, cold_set_count(nbytes, l2), gen)
    ref = reference(sets[0][0], sets[0][1], LAYOUT)
    tol = REL_TOL[DTYPES[dtype]]
    row = {"m": m, "n": n, "k": k, "dtype": dtype, "layout": LAYOUT, "bytes": nbytes, "sets": len(sets),
           "cold_bytes": nbytes * len(sets), "cublaslt": {}, "decode": [], "rejected": 0}
    row["cudal2"] = measure(cudal2_call(sets), sets, ref, tol, nbytes, bandwidth_gbs)
    for policy in ("heuristic", "autotune"):
        row["cublaslt"][policy] = measure(lt_call(sets, policy), sets, ref, tol, nbytes, bandwidth_gbs)
    for name in kernels:
        for splits in SPLITS:
            cand = measure(kernel_call(sets, name, splits), sets, ref, tol, nbytes, bandwidth_gbs)
            if cand is None:
                row["rejected"] += 1
            else:
                row["decode"].append({"kernel": name, "splits": splits, **cand})
    row["best"] = fastest(row["decode"])
    auto = row["cublaslt"]["autotune"]
    timed = row["best"] and auto and auto.get("us") is not None
    row["speedup_vs_autotune"] = auto["us"] / row["best"]["us"] if timed else None
    return row


def problem_line(row: dict) -> str:
    """One progress line per problem."""
    best, auto = row["best"] or {}, row["cublaslt"]["autotune"] or {}
    return (f"{row['dtype']} M={row['m']} N={row['n']} K={row['k']}: decode {best.get('kernel', '-')} "
            f"splits={best.get('splits', '-')} {_f(best.get('us'), 2)} us {_f(best.get('pct'))}% | cuBLASLt-autotune "
            f"{_f(auto.get('us'), 2)} us {_f(auto.get('pct'))}% | ratio {_f(row['speedup_vs_autotune'], 3)}")


def write(out: Path, doc: dict) -> None:
    """The JSON document at `out` and its markdown report next to it (same stem, .md)."""
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(doc, indent=1))
    out.with_suffix(".md").write_text(render_markdown(doc))


def parse_args(argv: list[str]) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="python -m benchmarks.decode_bandwidth", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", type=Path, help="JSON results; the markdown goes next to it (.md)")
    p.add_argument("--render", type=Path, help="measure nothing: write the markdown of this stored results file "
                                               "(.json or .json.gz) next to it")
    p.add_argument("--dtypes", default="fp16,bf16", help="comma-separated, from fp16,bf16")
    p.add_argument("--max-shapes", type=int, default=None, help="at most this many (M, N, K), evenly spread")
    p.add_argument("--budget-s", type=float, default=150.0, help="start no problem after this many seconds")
    p.add_argument("--min-nk", type=int, default=0, help="only shapes with N*K >= this (e.g. large weights)")
    p.add_argument("--kernels", default=None,
                   help="comma-separated fnmatch patterns: time only matching decode kernels (default: all loaded)")
    p.add_argument("--seed", type=int, default=0, help="input seed")
    args = p.parse_args(argv)
    if (args.out is None) == (args.render is None):
        p.error("give --out (measure) or --render (report a stored results file)")
    args.dtypes = [d.strip() for d in args.dtypes.split(",") if d.strip()]
    args.kernels = [k.strip() for k in args.kernels.split(",") if k.strip()] if args.kernels else None
    if not args.dtypes or any(d not in DTYPES for d in args.dtypes):
        p.error(f"--dtypes: choose from {', '.join(DTYPES)}")
    if args.max_shapes is not None and args.max_shapes < 1:
        p.error("--max-shapes must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    args = parse_args(argv)
    if args.render:
        out = args.render.with_name(args.render.name.removesuffix(".gz").removesuffix(".json") + ".md")
        out.write_text(render_markdown(read_json(args.render)))
        print(f"wrote {out}")
        return 0
    if _C is None or not torch.cuda.is_available():
        print("benchmarks.decode_bandwidth needs the compiled extension and a CUDA GPU")
        return 2
    t0 = time.monotonic()
    head = env.header(argv) | {"command": "python -m benchmarks.decode_bandwidth " + " ".join(argv)}
    bandwidth = copy_bandwidth()
    print(f"measured copy bandwidth {bandwidth['gbs']:.0f} GB/s (median replay {bandwidth['median_gbs']:.0f} GB/s; "
          f"{bandwidth['source']})")
    l2 = l2_bytes()
    todo = problems(args.dtypes, args.max_shapes, args.min_nk)
    kernels = {dtype: decode_kernels(dtype, args.kernels) for dtype in args.dtypes}
    doc = {"environment": head, "bandwidth": bandwidth, "budget_s": args.budget_s, "complete": False, "wall_s": 0.0,
           "protocol": {"about": __doc__.split("\n\n")[1], "layout": LAYOUT, "max_m": MAX_M, "splits": list(SPLITS),
                        "l2_bytes": l2, "cold": f"input sets total > {COLD_FACTOR}x L2 ({l2 / 2**20:.0f} MiB)",
                        "problems": len(todo), "max_shapes": args.max_shapes, "min_nk": args.min_nk,
                        "kernel_patterns": args.kernels, "seed": args.seed,
                        "tolerance": {d: REL_TOL[DTYPES[d]] for d in args.dtypes}, "kernels": kernels},
           "rows": []}
    gen = torch.Generator(device="cuda").manual_seed(args.seed)
    for m, n, k, dtype in todo:
        if time.monotonic() - t0 > args.budget_s:
            break
        doc["rows"].append(measure_problem(m, n, k, dtype, kernels[dtype], l2, bandwidth["gbs"], gen))
        print(problem_line(doc["rows"][-1]), flush=True)
        doc |= {"summary": summarize(doc["rows"]), "wall_s": time.monotonic() - t0}
        write(args.out, doc)
    doc |= {"summary": summarize(doc["rows"]), "wall_s": time.monotonic() - t0,
            "complete": len(doc["rows"]) == len(todo)}
    write(args.out, doc)
    s = doc["summary"]
    print(f"wrote {args.out} and {args.out.with_suffix('.md')}: {len(doc['rows'])}/{len(todo)} problems in "
          f"{doc['wall_s']:.0f} s, bandwidth {bandwidth['gbs']:.0f} GB/s (measured)")
    for impl in ("cudal2", "decode", "cublaslt_autotune"):
        a, small = s[impl]["all"], s[impl]["nk_le_16m"]
        print(f"{impl}: median {_f(a['median'])}% min {_f(a['min'])}% | N*K<=16M median {_f(small['median'])}% "
              f"min {_f(small['min'])}%")
    h = s["vs_cublaslt_autotune"]
    print(f"decode beats cuBLASLt-autotune on {h['decode_wins']}/{h['compared']} problems; targets: "
          + "; ".join(f"{t.get('impl', 'decode')}: {t['target']} {'met' if t['met'] else 'not met'}"
                      for t in s["targets"]))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
