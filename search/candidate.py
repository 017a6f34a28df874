"""The search's shared vocabulary: a candidate kernel, a request to evaluate it on one problem, and the verdict.

Every stage of the loop (proposers, compile farm, evaluators, store, reward, policy, report) speaks these types, so
each can be replaced (a simulated evaluator in CPU tests, a Ray backend across hosts) without the others changing.
A candidate is either a point of the search space (a kernel config plus runtime knobs, rendered by codegen) or a
whole kernel source implementing the kernel C ABI (`csrc/include/cudal2/abi.h`), typically written by an LLM.
"""
from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Any

from cudal2_ops.tables import Problem  # noqa: F401 (the search's problem type; re-exported)

# Verdicts, in pipeline order. Only OK candidates carry times; every other status carries its reason.
OK = "ok"
MALFORMED = "malformed"        # an answer that could not be parsed into a point or a source
INFEASIBLE = "infeasible"      # a point the family's feasibility check rejects (reason: the check's)
SCAN_REJECTED = "scan_rejected"  # a banned construct in the source, its preprocessed text or its object
COMPILE_ERROR = "compile_error"
UNSUPPORTED = "unsupported"    # the kernel's can_implement refused the problem
INCORRECT = "incorrect"        # failed a correctness check (random, exact-integer, NaN/guard, stream, outputs of the
                               # timed replays and eager calls)
SUSPICIOUS = "suspicious"      # work missing from the captured graph, timing disagreement (judge vs runner events,
                               # events vs wall clock), above the roofline
CRASH = "crash"                # the evaluation worker died (fault, abort); the candidate is blamed
HANG = "hang"                  # the evaluation worker exceeded its time limit and was killed
STATUSES = (OK, MALFORMED, INFEASIBLE, SCAN_REJECTED, COMPILE_ERROR, UNSUPPORTED, INCORRECT, SUSPICIOUS, CRASH, HANG)


@dataclasses.dataclass(frozen=True)
class Candidate:
    """A kernel to try: a config point (`config` = HgemmConfig.name, `knobs` = (splits, swizzle, raster)) or a
    search-written `source` (C ABI; its kernel name is `source_name`). `provenance`: "policy" | "random" | "sweep" |
    "llm:<model>" | ... (who proposed it)."""

    config: str = ""
    knobs: tuple[int, int, int] = (0, 0, 0)
    source: str = ""
    source_name: str = ""
    provenance: str = ""

    @property
    def kernel_name(self) -> str:
        """The kernel's C ABI name (the config name, or the name a source kernel exports)."""
        return self.config or self.source_name

    @property
    def build_key(self) -> str:
        """What one compiled artifact is: the config name, or a hash of the source (knobs need no compile)."""
        if self.config:
            return self.config
        return "src_" + hashlib.sha256(self.source.encode()).hexdigest()[:16]

    @property
    def id(self) -> str:
        """Stable identity of (build, knobs): the store's candidate key."""
        return f"{self.build_key}@{self.knobs[0]}.{self.knobs[1]}.{self.knobs[2]}"

    def to_json(self) -> dict[str, Any]:
        return dataclasses.asdict(self)

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> "Candidate":
        doc = dict(doc)
        doc["knobs"] = tuple(doc.get("knobs", (0, 0, 0)))
        return cls(**doc)


@dataclasses.dataclass
class EvalResult:
    """The verdict on one candidate for one problem.

    `us`: the candidate's kernel-mode time per call (median over test cases), taken by the judge's own events
    around the candidate runner's work, when status is OK; `baseline_us`: cuBLASLt-autotune on the same problem and
    buffers, timed by the judge; `case_speedups`: baseline / candidate per test case (the paper's reward averages
    these); `max_rel_err`: worst relative error against the fp32 reference over the timed outputs; `reason`: why it
    was not OK (compiler output excerpt, failed check, scan hit); `gpu`: the evaluating GPU's environment summary;
    `compile_s` / `eval_s`: wall time spent; `baseline_cases`: the judge's per-case baseline times for the problem
    (`search.baseline_cache`), kept so that later evaluations and resumed runs reuse them.
    """

    status: str
    us: float | None = None
    baseline_us: float | None = None
    case_speedups: list[float] = dataclasses.field(default_factory=list)
    max_rel_err: float | None = None
    reason: str = ""
    gpu: dict[str, Any] = dataclasses.field(default_factory=dict)
    compile_s: float = 0.0
    eval_s: float = 0.0
    baseline_cases: dict[str, Any] = dataclasses.field(default_factory=dict)  # the judge's baseline document

    def __post_init__(self) -> None:
        if self.status not in STATUSES:
            raise ValueError(f"unknown status {self.status!r}; one of {STATUSES}")

    @property
    def speedup(self) -> float | None:
        """baseline / candidate (> 1: faster than cuBLASLt-autotune), or None when not measured."""
        if self.status != OK or not self.us or not self.baseline_us:
            return None
        return self.baseline_us / self.us

    def to_json(self) -> str:
        return json.dumps(dataclasses.asdict(self), sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> "EvalResult":
        return cls(**json.loads(text))


@dataclasses.dataclass
class Proposal:
    """What a proposer returns for one problem: a candidate, or the reason its answer could not become one.

    `status` is "" for a usable candidate, else MALFORMED / INFEASIBLE / SCAN_REJECTED with `reason`. LLM proposals
    keep the `prompt` and raw `completion` (the store keeps them; `python -m search export` writes them with the
    reward as RL fine-tuning data).
    """

    candidate: Candidate | None
    status: str = ""
    reason: str = ""
    prompt: str = ""
    completion: str = ""
