"""PNG plots of a run: speedup of ours over each baseline against log2(MNK) with bucket medians, and % of roofline
per implementation. Uses matplotlib's Agg backend (no display needed)."""
from __future__ import annotations

import math
import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
from matplotlib import ticker  # noqa: E402

from cudal2_testing.measure.figures import save_png  # noqa: E402
from benchmarks.stats import BASELINES, Comparison, roofline_floor_us, shape_of  # noqa: E402
from cudal2_testing.measure.shapes import BUCKET_EDGES, BUCKET_LABELS, bucket_of, log2_mnk  # noqa: E402

SPEEDUP_TICKS = (0.125, 0.25, 0.5, 0.75, 0.9, 1.0, 1.1, 1.25, 1.5, 2.0, 3.0, 4.0, 8.0)
# x position of each bucket's median marker (the bucket centre; the open ends get a nominal width).
BUCKET_CENTRES = dict(zip(BUCKET_LABELS, [(a + b) / 2 for a, b in
                                          zip((BUCKET_EDGES[0] - 4,) + BUCKET_EDGES, BUCKET_EDGES + (43,))]))


def _bucket_medians(points: list[tuple[tuple[int, int, int], float]]) -> tuple[list[float], list[float]]:
    xs, ys = [], []
    for label in BUCKET_LABELS:
        vals = [v for s, v in points if bucket_of(s) == label]
        if vals:
            xs.append(BUCKET_CENTRES[label])
            ys.append(statistics.median(vals))
    return xs, ys


def speedup_plot(comp: Comparison, path: Path, title: str) -> Path | None:
    """One panel per baseline: speedup per shape (log y) and the bucket medians; None when nothing to plot."""
    present = [b for b in BASELINES if comp.speedups(b)]
    if not present:
        return None
    cols = min(5, len(present))
    rows = math.ceil(len(present) / cols)
    fig, axes = plt.subplots(rows, cols, figsize=(3.6 * cols, 3.0 * rows), squeeze=False, sharey=True)
    for ax, baseline in zip(axes.flat, present):
        sp = list(comp.speedups(baseline).items())
        ax.scatter([log2_mnk(s) for s, _ in sp], [v for _, v in sp], s=6, alpha=0.4)
        ax.plot(*_bucket_medians(sp), "o-", color="C3", label="bucket median")
        ax.axhline(1.0, color="k", lw=0.8)
        ax.set_yscale("log")
        ax.yaxis.set_major_locator(ticker.FixedLocator(SPEEDUP_TICKS))
        ax.yaxis.set_major_formatter(ticker.FixedFormatter([f"{t:g}" for t in SPEEDUP_TICKS]))
        ax.yaxis.set_minor_locator(ticker.NullLocator())
        ax.set_title(f"vs {baseline}", fontsize=9)
        ax.set_xlabel("log2(M*N*K)", fontsize=8)
    for ax in axes.flat[len(present):]:
        ax.axis("off")
    axes[0][0].set_ylabel("speedup (t_baseline / t_ours)")
    axes[0][0].legend(fontsize=7)
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    save_png(fig, path)
    plt.close(fig)
    return path


def roofline_plot(rows: list[dict], roofline: dict, mode: str, path: Path, title: str,
                  stat: str = "median") -> Path | None:
    """Bucket medians of % of roofline against log2(MNK), one line per (implementation, layout)."""
    series: dict[str, list] = {}
    for r in rows:
        if r["ok"] and r["mode"] == mode:
            s = shape_of(r)
            eff = 100 * roofline_floor_us(s, roofline["peak_tflops"], roofline["bandwidth_gbs"]) / r[f"{stat}_us"]
            series.setdefault(f"{r['impl']} ({r['layout']})", []).append((s, eff))
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(8, 4.5))
    for name, points in sorted(series.items()):
        ax.plot(*_bucket_medians(points), "o-", label=name)
    ax.set_xlabel("log2(M*N*K) (bucket medians)")
    ax.set_ylabel("% of roofline")
    ax.set_title(title, fontsize=10)
    ax.legend(fontsize=7, ncol=2)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    save_png(fig, path)
    plt.close(fig)
    return path
