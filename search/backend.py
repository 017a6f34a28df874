"""The backend protocol: what the search loop needs from whatever compiles and times candidates.

Implementations: `search.simulate.SimulatedBackend` (CPU cost model, tests), `search.backends.local.LocalBackend`
(this machine's nvcc and GPUs) and `search.backends.ray_backend.RayBackend` (a Ray cluster).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Protocol

from search.candidate import Candidate, EvalResult, Problem


@dataclasses.dataclass
class CompileOutcome:
    """One build: whether it compiled, the shared library's path, the compiler log and the wall time it took."""

    ok: bool
    artifact: str = ""
    log: str = ""
    seconds: float = 0.0


class Backend(Protocol):
    """Compiles builds and evaluates (candidate, problem) pairs; the cuBLASLt baseline of each problem is timed
    inside `evaluate`, in the same process as the candidate."""

    def compile(self, candidates: list[Candidate]) -> dict[str, CompileOutcome]:
        """Builds each distinct `Candidate.build_key`; the outcome per build key."""

    def evaluate(self, requests: list[tuple[Candidate, Problem]]) -> list[EvalResult]:
        """Checks and times each compiled candidate on its problem; one result per request, in order. The build may
        have been compiled by an earlier process (the loop never recompiles a build key the store has): the backend
        finds its artifact by build key (e.g. in its artifacts folder). A backend may also offer
        `evaluate_iter(requests) -> Iterator[tuple[int, EvalResult]]`, the same verdicts as (request index, verdict)
        in the order they finish: the loop then stores each as it arrives (else when `evaluate` returns)."""

    def prebuilt(self) -> set[str]:
        """Build keys that need no compile (the default kernels built into the extension's library): the loop
        records them as built and `evaluate` must run them from that library."""

    def environment(self) -> dict[str, Any]:
        """The evaluating GPU: gpu_name, arch (e.g. 90), capability [9, 0], sm_count, driver, cuda, ..."""

    def close(self) -> None:
        """Releases workers and GPUs."""
