"""What the search found: the winning kernels' patterns by problem size, generated from measurements (the paper's
section 6.2 for this project's families).

Input: sweep-format rows (a `python -m search.sweep` file, or a store's evaluations through `emit.sweep_of`). For each
problem the fastest correct candidate is its winner when it beats cuBLASLt-autotune by the table margin (3%);
winners are counted by log2(M*N*K) bucket: family, CTA tile, cluster, schedule and scheduler, split-K (stream-K on
sm90; on the others the splits knob, 0 meaning automatic, and the workspace policy), operand swap, no-smem
epilogue, and whether the config is one of the built defaults or a searched one.

    python -m search findings --store s.db [--sweep FILE ...] --out findings.md
"""
from __future__ import annotations

import collections
import statistics

from cudal2_ops.measure.shapes import BUCKET_LABELS, bucket_of
from search.codegen import default_configs
from search.config import HgemmConfig
from search.table_select import DEFAULT_MARGIN

TOP = 3  # most frequent values shown per pattern and bucket


def winner(row: dict, margin: float = DEFAULT_MARGIN) -> tuple[dict | None, float]:
    """(the row's fastest correct candidate if it beats the baseline by `margin`, else None; its speedup)."""
    timed = [c for c in row["candidates"] if c.get("correct") and c.get("us")]
    if not timed:
        return None, 0.0
    best = min(timed, key=lambda c: c["us"])
    speedup = row["baseline_us"] / best["us"]
    return (best if speedup >= 1.0 + margin else None), speedup


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


def findings_lines(rows: list[dict], margin: float = DEFAULT_MARGIN) -> list[str]:
    """The Markdown of the write-up for sweep-format `rows`."""
    defaults = {c.name for c in default_configs()}
    by_bucket: dict[str, list] = collections.defaultdict(list)
    for row in rows:
        best, speedup = winner(row, margin)
        by_bucket[bucket_of((row["m"], row["n"], row["k"]))].append((row, best, speedup))
    summary, detail = [], []
    for bucket in BUCKET_LABELS:
        entries = by_bucket.get(bucket, [])
        if not entries:
            continue
        wins = [(row, best, s) for row, best, s in entries if best is not None]
        kept = [max(1.0, s) if best is not None else 1.0 for _, best, s in entries]
        searched = sum(1 for _, best, _ in wins if best["kernel"] not in defaults)
        summary.append([bucket, len(entries), len(wins), f"{statistics.geometric_mean(kept):.3f}",
                        f"{max(s for _, _, s in entries):.3f}", searched])
        counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
        for _, best, _ in wins:
            try:
                cfg = HgemmConfig.from_name(best["kernel"])
            except ValueError:
                counts["family"]["(source kernel)"] += 1
                continue
            for name, value in patterns(cfg, best.get("splits", 0)).items():
                counts[name][value] += 1
        for name, counter in counts.items():
            detail.append([bucket, name, ", ".join(f"{v} ({n})" for v, n in counter.most_common(TOP))])
    header = ["bucket log2(MNK)", "problems", f"won (>= {1 + margin:.2f}x)", "geomean (cuBLASLt kept)", "best",
              "won by a searched config"]
    lines = ["Winners: per problem the fastest correct candidate, when it beats cuBLASLt-autotune by the table "
             f"margin ({margin:.0%}).", ""] + markdown_table(header, summary)
    lines += ["", "Patterns of the winners (most frequent values, count of winning problems):", ""]
    lines += markdown_table(["bucket", "choice", "values"], detail) if detail else ["No winners."]
    return lines


def markdown_table(header: list[str], rows: list[list]) -> list[str]:
    """A Markdown table's lines."""
    return ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)] + \
        ["| " + " | ".join(str(c) for c in row) + " |" for row in rows]
