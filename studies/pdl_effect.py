"""`python -m studies.pdl_effect`: how much programmatic dependent launch (PDL) shortens each family's kernel-mode
times, from two sweeps of the same kernels (one with PDL on, one run with CUDAL2_DISABLE_PDL=1).

For every (problem, kernel, knobs) timed correct in both, the ratio of its PDL-on time to its PDL-off time, and the
same for the cuBLASLt-autotune baseline of the problem; geomeans by kernel family and log2(M*N*K) bucket.

    python -m studies.pdl_effect SWEEP_PDL_ON SWEEP_PDL_OFF --out pdl_effect.md
"""
from __future__ import annotations

import argparse
import collections
from pathlib import Path

from cudal2_catalog.config import Knobs
from cudal2_testing.measure.shapes import BUCKET_LABELS, bucket_of
from cudal2_testing.measure.summary import geomean, markdown_table
from search.table_select import read_sweep


def timings(sweep: dict) -> dict[tuple, tuple[float, float]]:
    """(layout, dtype, m, n, k, kernel, splits, swizzle, raster) -> (kernel us, baseline us) of correct timings."""
    out = {}
    for row in sweep["rows"]:
        problem = (row["layout"], row["dtype"], row["m"], row["n"], row["k"])
        for c in row["candidates"]:
            if c.get("correct") and c.get("us"):
                out[problem + (c["kernel"],) + Knobs.from_dict(c)] = (c["us"], row["baseline_us"])
    return out


def effect_lines(pdl_on: dict, pdl_off: dict) -> list[str]:
    """The Markdown table of on/off time ratios by family and bucket (kernel; baseline in brackets)."""
    on, off = timings(pdl_on), timings(pdl_off)
    ratios: dict[tuple[str, str], list[tuple[float, float]]] = collections.defaultdict(list)
    for key in on.keys() & off.keys():
        family = key[5].split("_")[0]
        ratios[(family, bucket_of(key[2:5]))].append((on[key][0] / off[key][0], on[key][1] / off[key][1]))
    rows = []
    for family in sorted({f for f, _ in ratios}):
        cells = []
        for bucket in BUCKET_LABELS:
            pairs = ratios.get((family, bucket))
            cells.append(f"{geomean(k for k, _ in pairs):.3f} "
                         f"({geomean(b for _, b in pairs):.3f}; n {len(pairs)})" if pairs else "-")
        rows.append([family] + cells)
    return [f"{sum(len(v) for v in ratios.values())} (problem, kernel, knobs) timed correct in both sweeps. Geomean of "
            "t(PDL on) / t(PDL off) for the kernel, (for the problem's cuBLASLt-autotune baseline; count):", ""] + \
        markdown_table(["family"] + [f"log2 MNK {b}" for b in BUCKET_LABELS], rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.pdl_effect", description=__doc__.split("\n\n")[0])
    parser.add_argument("pdl_on", type=Path, help="sweep with PDL on (.json or .json.gz)")
    parser.add_argument("pdl_off", type=Path, help="sweep of the same kernels with CUDAL2_DISABLE_PDL=1")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    on, off = read_sweep(args.pdl_on), read_sweep(args.pdl_off)
    lines = [f"# PDL effect in kernel mode ({on['environment']['gpu_name']})", "",
             f"PDL on: `{args.pdl_on.name}`; PDL off: `{args.pdl_off.name}`.", ""] + effect_lines(on, off)
    args.out.write_text("\n".join(lines) + "\n")
    print("\n".join(lines))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
