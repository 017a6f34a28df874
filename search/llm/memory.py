"""The contextual memory of LLM prompts: a markdown file of what the search has learned, rewritten after each round.

It starts from the seed notes (`gpu_memory.md`) and appends facts measured in the store: the best speedup reached by
each family of the catalog, and the most frequent rejections. No text of an answer, a compile log or a check reaches
it (they reach later prompts through it): a rejection is told by its status and a label from a fixed vocabulary
(REASON_LABELS) that its reason matched.
"""
from __future__ import annotations

import collections
import re
import sqlite3
from pathlib import Path

from cudal2_catalog.config import FAMILIES
from search.candidate import STATUSES

SEED = Path(__file__).resolve().parent / "gpu_memory.md"
MEASURED_HEADER = "\n## Measured by this search\n"
TOP_REASONS = 5

# (label shown in the memory, pattern of the reasons it stands for); the first label whose pattern matches wins.
REASON_LABELS: tuple[tuple[str, str], ...] = (
    ("no answer from the endpoint", r"^no answer"),
    ("an answer that is not valid JSON", r"not valid JSON|not JSON|nested too deeply"),
    ("a point with a field outside the space", r"^point "),
    ("a kernel source without the C ABI export", r"does not export"),
    ("a kernel name that is not a C identifier", r"not a C identifier"),
    ("a candidate already tried on the problem", r"already tried"),
    ("the build budget spent", r"build budget spent"),
    ("a stream or event of its own", r"stream or event"),
    ("host synchronisation", r"host synchroni[sz]ation"),
    ("a call into another GEMM library or torch", r"another GEMM library|cublas|cudnn"),
    ("memory allocation in the launcher", r"memory allocation"),
    ("state kept between calls (a cache keyed by pointers)", r"static cache|keyed by pointers|state kept between"),
    ("a persisting-L2 access policy", r"persisting-L2"),
    ("host threads", r"host threads"),
    ("fp16 accumulation", r"fp16 accumulation|half accumulat|bf16 accumulation"),
    ("a constructor or initializer in the object", r"constructor|initiali[sz]er|init_array"),
    ("an include outside the project, CUDA and CUTLASS", r"include"),
    ("an undefined symbol outside the allowlist", r"undefined symbol"),
    ("a compile or check timeout", r"timed out|timeout|time limit"),
    ("shared memory over the limit", r"shared memory|smem"),
    ("registers over the limit", r"register"),
    ("an alignment the problem does not meet", r"align"),
    ("a cluster shape the family refuses", r"cluster"),
    ("work off the caller's stream or out of the captured graph", r"stream|graph"),
    ("wrong results in the exact-integer check", r"exact"),
    ("wrong results in the random check", r"random check|rel(ative)? err"),
    ("NaN or guard-band writes", r"nan|guard"),
    ("a timing disagreement", r"wall.clock|disagree|roofline"),
    ("an illegal memory access", r"illegal (memory )?a(ccess|ddress)"),
    ("a kernel that declined the problem", r"can_implement|declin|refuse|take M"),
)


def read(path: str | Path) -> str:
    """The memory text at `path`, or the seed notes while the file does not exist yet."""
    path = Path(path)
    return path.read_text() if path.exists() else SEED.read_text()


def family_of(candidate_id: str) -> str | None:
    """The family of a store candidate id (`sm90_tma_ws_fp16_...@0.0.0` -> sm90_tma_ws; sources: "source kernels"),
    or None when it names no family of the catalog."""
    if candidate_id.startswith("src_"):
        return "source kernels"
    family = candidate_id.split("_fp16_")[0].split("_bf16_")[0]
    return family if family in FAMILIES else None


def rejection(status: str, reason: str) -> str:
    """A rejection told in the fixed vocabulary: the status (a known one, else "other") and the label of the first
    REASON_LABELS pattern the reason matches, if any."""
    status = status if status in STATUSES else "other"
    label = next((label for label, pattern in REASON_LABELS if re.search(pattern, reason, re.IGNORECASE)), "")
    return f"{status} ({label})" if label else status


def measured_facts(store) -> list[str]:
    """Lines of facts from the store's evaluations and proposals (none when its tables are not there yet)."""
    try:
        evals = store.query("SELECT candidate_id, status, reason, us, baseline_us FROM evaluations")
        proposals = store.query("SELECT status, reason FROM proposals WHERE status != ''")
    except sqlite3.Error:
        return []
    best: dict[str, float] = {}
    for row in evals:
        family = family_of(row["candidate_id"])
        if row["status"] == "ok" and row["us"] and row["baseline_us"] and family:
            best[family] = max(best.get(family, 0.0), float(row["baseline_us"]) / float(row["us"]))
    reasons = collections.Counter(rejection(r["status"], str(r["reason"])) for r in (*evals, *proposals)
                                  if r["status"] != "ok")
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
