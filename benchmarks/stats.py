"""Speedups and their aggregates (docs/EVALUATION.md): per baseline and mode, speedup_s = t_baseline / t_ours;
geomean, mean, median, std, min, max, wins (> 1.00), losses (< 0.98); "-max" baselines take per shape the faster of
the NN and TN variant; failed rows are excluded and counted; roofline efficiency per implementation."""
from __future__ import annotations

import re
import statistics
from dataclasses import dataclass, field

from cudal2_testing.measure.shapes import BUCKET_LABELS, Shape, bucket_of
from cudal2_testing.measure.summary import geomean

LOSS_BELOW = 0.98
WIN_ABOVE = 1.00
VARIANTS = {"cublas": ("cublas-nn", "cublas-tn"),
            "cublaslt-heuristic": ("cublaslt-heuristic-nn", "cublaslt-heuristic-tn"),
            "cublaslt-autotune": ("cublaslt-autotune-nn", "cublaslt-autotune-tn")}
# Each same-layout autotune baseline and its independent repeat (benchmarks.impls), whose ratio is the noise floor.
REPEATS = {"nn": ("cublaslt-autotune-nn", "cublaslt-autotune-nn-repeat"),
           "nt": ("cublaslt-autotune-tn", "cublaslt-autotune-tn-repeat")}
# Baselines compared in the layout of ours: torch, and cudal2 with its table's cuBLASLt choices as shipped
# (benchmarks.impls.SHIPPED).
SAME_LAYOUT = ("torch", "cudal2-shipped")
BASELINES = SAME_LAYOUT + tuple(n for fam, pair in VARIANTS.items() for n in (*pair, f"{fam}-max")) + tuple(
    repeat for _, repeat in REPEATS.values())
# Comparison.ran's key for ours, whatever its name in the run.
OURS_KEY = "ours"
# A shape "below" the bar in the noise-floor count (the tuned-by-default targets' threshold).
BELOW = 0.97
# The autotuned cuBLASLt must not be slower than the heuristic one on average (geomean ratio), within 1 % noise.
AUTOTUNE_SANITY_MIN = 0.99


def aggregate(speedups: list[float]) -> dict:
    """geomean, mean, median, std, min, max, wins, losses and n of a list of speedups."""
    if not speedups:
        return {"n": 0, "geomean": None, "mean": None, "median": None, "std": None, "min": None, "max": None,
                "wins": 0, "losses": 0}
    return {"n": len(speedups), "geomean": geomean(speedups), "mean": statistics.fmean(speedups),
            "median": statistics.median(speedups), "std": statistics.pstdev(speedups), "min": min(speedups),
            "max": max(speedups), "wins": sum(s > WIN_ABOVE for s in speedups),
            "losses": sum(s < LOSS_BELOW for s in speedups)}


def shape_of(row: dict) -> Shape:
    return row["m"], row["n"], row["k"]


def groups(rows: list[dict], ours: str) -> list[tuple[str, str, str]]:
    """(mode, layout, dtype) combinations for which the run has rows of `ours`."""
    return sorted({(r["mode"], r["layout"], r["dtype"]) for r in rows if r["impl"] == ours})


@dataclass
class Comparison:
    """Ours against every baseline for one (mode, layout, dtype): per-shape times of valid rows, failure counts."""

    mode: str
    layout: str
    dtype: str
    ours: dict[Shape, float] = field(default_factory=dict)
    base: dict[str, dict[Shape, float]] = field(default_factory=dict)
    failures: dict[str, int] = field(default_factory=dict)
    ran: dict[str, dict[Shape, dict]] = field(default_factory=dict)  # per implementation, its rows' `ran` where said

    def speedups(self, baseline: str) -> dict[Shape, float]:
        """t_baseline / t_ours for shapes where both are valid."""
        times = self.base.get(baseline, {})
        return {s: times[s] / t for s, t in self.ours.items() if s in times}

    def summary(self, baseline: str) -> dict:
        return aggregate(list(self.speedups(baseline).values()))

    def by_bucket(self, baseline: str) -> dict[str, dict]:
        sp = self.speedups(baseline)
        return {b: aggregate([v for s, v in sp.items() if bucket_of(s) == b]) for b in BUCKET_LABELS}

    def autotune_sanity(self) -> dict:
        """geomean of t_heuristic_max / t_autotune_max over shapes where both are valid."""
        h, a = self.base.get("cublaslt-heuristic-max", {}), self.base.get("cublaslt-autotune-max", {})
        ratios = [h[s] / a[s] for s in h if s in a]
        ratio = geomean(ratios) if ratios else None
        return {"check": "cublaslt-autotune-max at least as fast as cublaslt-heuristic-max on average",
                "geomean_heuristic_over_autotune": ratio, "n": len(ratios),
                "ok": None if ratio is None else ratio >= AUTOTUNE_SANITY_MIN}


    def noise_floor(self) -> dict:
        """The same-layout cuBLASLt-autotune against its independent repeat: geomean of t_first / t_repeat and the
        shapes below BELOW, over shapes where both are valid (n 0 when the run has no repeat); `ours_below`: the shapes
        among those where ours is below BELOW of the same bar (the count noise alone explains is `below`)."""
        first, repeat = (self.base.get(name, {}) for name in REPEATS[self.layout])
        shapes = [s for s in first if s in repeat]
        ratios = [first[s] / repeat[s] for s in shapes]
        return {"n": len(ratios), "geomean": geomean(ratios) if ratios else None,
                "below": sum(r < BELOW for r in ratios),
                "ours_below": sum(first[s] / self.ours[s] < BELOW for s in shapes if s in self.ours)}

    def route(self, shape: Shape) -> str | None:
        """What ours ran on `shape`: "kernel" (its own), "cublaslt, the bar's configuration" / "cublaslt, another
        configuration" (against the configuration the same-layout cuBLASLt-autotune picked and ran in the same run),
        the bare path where the bar's is not known; None where the row does not say."""
        path = self.ran.get(OURS_KEY, {}).get(shape, {}).get("path")
        if path != "cublaslt":
            return path
        theirs = lt_config(self.ran.get(REPEATS[self.layout][0], {}).get(shape, {}))
        if theirs is None:
            return path
        if lt_config(self.ran[OURS_KEY][shape]) == theirs:
            return "cublaslt, the bar's configuration"
        return "cublaslt, another configuration"

    def by_route(self) -> dict[str, dict]:
        """Ours against the same-layout cuBLASLt-autotune (REPEATS' first) split by what ours ran on each shape
        (`route`): per route the aggregate and the shapes below BELOW, so that a table's own kernels, its cuBLASLt
        entries that run the bar's own choice and those that run another configuration are read apart."""
        bar = self.base.get(REPEATS[self.layout][0], {})
        split: dict[str, list[float]] = {}
        for s, t in self.ours.items():
            route = self.route(s)
            if s in bar and route:
                split.setdefault(route, []).append(bar[s] / t)
        return {route: aggregate(sp) | {"below": sum(v < BELOW for v in sp)} for route, sp in sorted(split.items())}


def lt_config(ran: dict) -> list[int] | None:
    """The cuBLASLt configuration a row's `ran` names, as integers in the dispatcher's field order (cudal2_ops.tables'
    LT_CONFIG_FIELDS): the baselines record the list, cudal2 the text `cudal2_ops.explain` gives ("algo_id=66 tile=13
    ...", written by csrc's LtConfig::str with every field in that order); None where it names none (a kernel ran, or
    the row does not say)."""
    config = ran.get("cublaslt_config")
    if isinstance(config, str):
        return [int(value) for _, value in re.findall(r"(\w+)=(-?\d+)", config)]
    return list(config) if config else None


def compare(rows: list[dict], mode: str, layout: str, dtype: str, ours: str = "cudal2",
            stat: str = "median") -> Comparison:
    """The Comparison of `ours` (rows in `layout`) with every baseline (the SAME_LAYOUT ones in `layout`, the
    fixed-layout ones as measured, plus the -max of each NN/TN pair) in one mode and dtype, using per-row `<stat>_us`
    times."""
    comp = Comparison(mode, layout, dtype)
    for r in rows:
        if r["mode"] != mode or r["dtype"] != dtype:
            continue
        if r["impl"] == ours and r["layout"] == layout:
            name = ours
        elif (r["impl"] in SAME_LAYOUT and r["layout"] == layout
              or r["impl"] in BASELINES and r["impl"] not in SAME_LAYOUT):
            name = r["impl"]
        else:
            continue
        if not r["ok"]:
            comp.failures[name] = comp.failures.get(name, 0) + 1
            continue
        (comp.ours if name == ours else comp.base.setdefault(name, {}))[shape_of(r)] = r[f"{stat}_us"]
        if r.get("ran"):
            comp.ran.setdefault(OURS_KEY if name == ours else name, {})[shape_of(r)] = r["ran"]
    for family, (nn, tn) in VARIANTS.items():
        a, b = comp.base.get(nn, {}), comp.base.get(tn, {})
        best = {s: min(t for t in (a.get(s), b.get(s)) if t is not None) for s in a.keys() | b.keys()}
        if best:
            comp.base[f"{family}-max"] = best
    return comp


def roofline_floor_us(shape: Shape, peak_tflops: float, bandwidth_gbs: float, elem: int = 2) -> float:
    """max(2MNK / peak, bytes / bandwidth) in microseconds, bytes = A + B + D once."""
    m, n, k = shape
    compute = 2 * m * n * k / (peak_tflops * 1e6)
    memory = elem * (m * k + k * n + m * n) / (bandwidth_gbs * 1e3)
    return max(compute, memory)


def roofline_efficiency(rows: list[dict], roofline: dict, stat: str = "median") -> dict[tuple[str, str, str], dict]:
    """{(impl, layout, mode): {median, geomean, n, by_bucket}} of floor / time over valid rows (1.0 = at the
    roofline); by_bucket: the median per log2(MNK) bucket (None where the bucket has no row)."""
    effs: dict[tuple[str, str, str], list[tuple[str, float]]] = {}
    for r in rows:
        if r["ok"]:
            floor = roofline_floor_us(shape_of(r), roofline["peak_tflops"], roofline["bandwidth_gbs"])
            effs.setdefault((r["impl"], r["layout"], r["mode"]), []).append(
                (bucket_of(shape_of(r)), floor / r[f"{stat}_us"]))
    out = {}
    for key, pairs in sorted(effs.items()):
        v = [e for _, e in pairs]
        per_bucket = {b: [e for bucket, e in pairs if bucket == b] for b in BUCKET_LABELS}
        out[key] = {"median": statistics.median(v), "geomean": geomean(v), "n": len(v),
                    "by_bucket": {b: statistics.median(e) if e else None for b, e in per_bucket.items()}}
    return out
