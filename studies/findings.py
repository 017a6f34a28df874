"""What the search found: the winning kernels' patterns by problem size, generated from measurements (the paper's
section 6.2 for this project's families).

Input: measurements (`search.table_select.Measured`) of `python -m search.sweep` files or of search stores. For each
problem the fastest correct candidate is its winner when table selection would take it (faster than cuBLASLt-autotune
by more than the table margin, 3%); winners are counted by log2(M*N*K) bucket: family, CTA tile, cluster, schedule
and scheduler, split-K (stream-K on sm90; on the others the splits knob, 0 meaning automatic, and the workspace
policy), operand swap, no-smem epilogue, and whether the config is one of the built defaults or a searched one.

    python -m studies.findings --store s.db [--sweep FILE ...] --out findings.md
"""
from __future__ import annotations

import argparse
import collections
from pathlib import Path

from cudal2_testing.measure.shapes import BUCKET_LABELS, bucket_of
from cudal2_testing.measure.summary import geomean, markdown_table
from cudal2_catalog.codegen import default_configs
from cudal2_catalog.config import HgemmConfig, config_of
from search.emit import measurements
from search.store import Store
from search.table_select import DEFAULT_MARGIN, Measured, Timed, best_candidate, from_sweep_rows, read_sweep

TOP = 3  # most frequent values shown per pattern and bucket


def winner(measured: Measured, margin: float = DEFAULT_MARGIN) -> tuple[Timed | None, float]:
    """(the problem's table winner under `margin`, else None; the speedup of its fastest correct candidate)."""
    timed = [c.us for c in measured.candidates if c.correct and c.us]
    if not timed:
        return None, 0.0
    return best_candidate(measured, margin), measured.baseline_us / min(timed)


def patterns(cfg: HgemmConfig, splits: int) -> dict[str, str]:
    """The choices of a winning config the write-up counts."""
    if cfg.family == "sm90_tma_ws":  # only the stream-K scheduler splits K (the persistent one ignores the knob)
        split = (f"stream-K, {splits} splits" if splits > 1 else "stream-K") if cfg.scheduler == "streamk" else "none"
    else:
        count = {0: "automatic", 1: "none"}.get(splits, f"{splits} splits")  # 0: as many as fill the idle SMs
        split = count + (" (workspace policy)" if cfg.splitk and splits != 1 else "")
    out = {"family": cfg.family, "tile": f"{cfg.tile_m}x{cfg.tile_n}x{cfg.tile_k}", "split-K": split}
    if cfg.family == "sm90_tma_ws":
        out.update({"cluster": f"{cfg.cluster_m}x{cfg.cluster_n}", "schedule": f"{cfg.schedule} {cfg.scheduler}",
                    "swap A/B": "yes" if cfg.swap_ab else "no", "epilogue": cfg.epilogue or "tma"})
    else:
        out["warps"] = str(cfg.warps)
    return out


def findings_lines(measured: list[Measured], margin: float = DEFAULT_MARGIN) -> list[str]:
    """The Markdown of the write-up for one GPU's measurements."""
    defaults = {c.name for c in default_configs()}
    by_bucket: dict[str, list] = collections.defaultdict(list)
    for m in measured:
        best, speedup = winner(m, margin)
        by_bucket[bucket_of(m.problem[2:])].append((m, best, speedup))
    summary, detail = [], []
    for bucket in BUCKET_LABELS:
        entries = by_bucket.get(bucket, [])
        if not entries:
            continue
        wins = [(m, best, s) for m, best, s in entries if best is not None]
        kept = [max(1.0, s) if best is not None else 1.0 for _, best, s in entries]
        searched = sum(1 for _, best, _ in wins if best.kernel not in defaults)
        summary.append([bucket, len(entries), len(wins), f"{geomean(kept):.3f}",
                        f"{max(s for _, _, s in entries):.3f}", searched])
        counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        for _, best, _ in wins:
            cfg = config_of(best.kernel)
            if cfg is None:
                counts["family"]["(source kernel)"] += 1
                continue
            for name, value in patterns(cfg, best.knobs.splits).items():
                counts[name][value] += 1
        for name, counter in counts.items():
            detail.append([bucket, name, ", ".join(f"{v} ({n})" for v, n in counter.most_common(TOP))])
    header = ["bucket log2(MNK)", "problems", f"won (time > {margin:.0%} under cuBLASLt)", "geomean (cuBLASLt kept)",
              "best", "won by a searched config"]
    lines = ["Winners: per problem the fastest correct candidate, when it beats cuBLASLt-autotune by the table "
             f"margin ({margin:.0%}).", ""] + markdown_table(header, summary)
    lines += ["", "Patterns of the winners (most frequent values, count of winning problems):", ""]
    lines += markdown_table(["bucket", "choice", "values"], detail) if detail else ["No winners."]
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m studies.findings", description=__doc__.split("\n\n")[0])
    parser.add_argument("--store", type=Path, nargs="*", default=[], help="search stores (.sqlite, .db)")
    parser.add_argument("--sweep", type=Path, nargs="*", default=[], help="python -m search.sweep files (.json, .gz)")
    parser.add_argument("--margin", type=float, default=DEFAULT_MARGIN)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    sections = []
    for path in args.store:
        store = Store(path, readonly=True)
        try:
            sections += [(f"store {path.name}, {g.environment['gpu_name']}", g.measured) for g in measurements(store)]
        finally:
            store.close()
    for path in args.sweep:
        sweep = read_sweep(path)
        sections.append((f"sweep {path.name}, {sweep['environment']['gpu_name']}", from_sweep_rows(sweep["rows"])))
    if not sections:
        parser.error("give at least one --store or --sweep")
    lines = ["# What the search found", ""]
    for title, measured in sections:
        lines += [f"## {title}", ""] + findings_lines(measured, args.margin) + [""]
    args.out.write_text("\n".join(lines))
    print(args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
