"""The contextual memory of LLM prompts: a markdown file of what the search has learned, rewritten after each round.

It starts from the seed notes (`gpu_memory.md`) and appends facts measured in the store: the best speedup reached by
each family, and the most frequent rejection reasons (so that the model stops repeating them).
"""
from __future__ import annotations

import collections
import sqlite3
from pathlib import Path

SEED = Path(__file__).resolve().parent / "gpu_memory.md"
MEASURED_HEADER = "\n## Measured by this search\n"
TOP_REASONS = 5


def read(path: str | Path) -> str:
    """The memory text at `path`, or the seed notes while the file does not exist yet."""
    path = Path(path)
    return path.read_text() if path.exists() else SEED.read_text()


def family_of(candidate_id: str) -> str:
    """The family of a store candidate id (`sm90_tma_ws_fp16_...@0.0.0` -> sm90_tma_ws; sources: "source kernels")."""
    if candidate_id.startswith("src_"):
        return "source kernels"
    return candidate_id.split("_fp16_")[0].split("_bf16_")[0]


def measured_facts(store) -> list[str]:
    """Lines of facts from the store's evaluations and proposals (none when its tables are not there yet)."""
    try:
        evals = store.query("SELECT candidate_id, status, reason, us, baseline_us FROM evaluations")
        proposals = store.query("SELECT status, reason FROM proposals WHERE status != ''")
    except sqlite3.Error:
        return []
    best: dict[str, float] = {}
    for row in evals:
        if row["status"] == "ok" and row["us"] and row["baseline_us"]:
            family = family_of(row["candidate_id"])
            best[family] = max(best.get(family, 0.0), row["baseline_us"] / row["us"])
    reasons = collections.Counter(f"{r['status']}: {r['reason'].split(';')[0][:160]}" for r in (*evals, *proposals)
                                  if r["status"] != "ok" and r["reason"])
    lines = [f"- {family}: best speedup over cuBLASLt-autotune so far {s:.3f}x" for family, s in sorted(best.items())]
    lines += [f"- rejected {count}x: {reason}" for reason, count in reasons.most_common(TOP_REASONS)]
    return lines


def update(store, path: str | Path) -> None:
    """Rewrites the memory file at `path`: the seed notes plus the facts measured so far in `store`."""
    facts = measured_facts(store)
    text = SEED.read_text() + (MEASURED_HEADER + "\n".join(facts) + "\n" if facts else "")
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
