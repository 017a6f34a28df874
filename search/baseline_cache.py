"""The judge's baseline, timed once per (problem, test case) and reused by every later evaluation of the problem.

The judge (`search.eval_worker`) times cuBLASLt-autotune on a problem's R buffer sets for each test case before any
candidate runner of that problem starts. Those times depend only on the problem, the case's inputs and the machine,
so the judge times them once: every evaluation of a problem uses the same per-problem case seeds (`case_seeds`), and
the times are kept as a document {"fingerprint", "problem", "calls", "seeds", "us", "wall_us"} in the judge process,
in the evaluator pool (which hands it to a restarted judge) and in the store (`baselines` table, so that a resumed
run reuses it). A document is used only where its fingerprint, the physical GPU (its UUID: two cards of one model
differ by a few percent, and a candidate's speedup must not mix them), driver, CUDA, cuBLAS(Lt), torch and PDL setting
it was timed under plus the timing protocol, equals the judge's own: anything else (another card, a new cuBLASLt)
times the baseline again.
"""
from __future__ import annotations

import hashlib
import json
import zlib
from typing import Any

FINGERPRINT_KEYS = ("gpu_name", "gpu_uuid", "sm_count", "capability", "driver", "cuda", "cublas", "torch",
                    "pdl_disabled")


def fingerprint(environment: dict[str, Any], protocol: str) -> str:
    """What a baseline time is valid for: the environment's FINGERPRINT_KEYS and the timing protocol, hashed."""
    facts = {key: environment.get(key) for key in FINGERPRINT_KEYS} | {"protocol": protocol}
    return hashlib.sha256(json.dumps(facts, sort_keys=True).encode()).hexdigest()[:16]


def case_seeds(problem_key: str, cases: int) -> list[int]:
    """The input seeds of a problem's test cases: the same for every candidate of the problem, so that its baseline
    timed on them serves them all; different between problems."""
    base = zlib.crc32(problem_key.encode()) % 1_000_000
    return [base * 1000 + case for case in range(cases)]


def valid(doc: dict | None, fingerprint_: str, problem_key: str, cases: int) -> bool:
    """Whether `doc` holds the baseline of `problem_key` for `cases` test cases under `fingerprint_`."""
    if not doc:
        return False
    return (doc.get("fingerprint") == fingerprint_ and doc.get("problem") == problem_key
            and doc.get("seeds") == case_seeds(problem_key, cases) and len(doc.get("us", [])) == cases
            and len(doc.get("wall_us", [])) == cases and int(doc.get("calls", 0)) >= 2
            and all(t > 0 for t in doc["us"] + doc["wall_us"]))


class BaselineCache:
    """Baseline documents by (fingerprint, problem key)."""

    def __init__(self, docs: list[dict] | None = None):
        self._docs: dict[tuple[str, str], dict] = {}
        for doc in docs or []:
            self.add(doc)

    def add(self, doc: dict) -> bool:
        """Keeps `doc` (the first one of its fingerprint and problem wins); whether it was new."""
        key = (doc["fingerprint"], doc["problem"])
        if key in self._docs:
            return False
        self._docs[key] = doc
        return True

    def get(self, fingerprint_: str, problem_key: str, cases: int) -> dict | None:
        """The valid document for this fingerprint, problem and case count, or None."""
        doc = self._docs.get((fingerprint_, problem_key))
        return doc if valid(doc, fingerprint_, problem_key, cases) else None

    def __len__(self) -> int:
        return len(self._docs)
