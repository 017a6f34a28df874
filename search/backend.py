"""The backend protocol: what the search loop needs from whatever compiles and times candidates.

Implementations: `search.simulate.SimulatedBackend` (CPU cost model, tests), `search.backends.local.LocalBackend`
(this machine's nvcc and GPUs) and `search.backends.ray_backend.RayBackend` (a Ray cluster).
"""
from __future__ import annotations

import dataclasses
from typing import Any, Iterable, Protocol

from search.candidate import COMPILE_ERROR, SCAN_REJECTED, Candidate, EvalResult, Problem

BUILD_FAILURES = (COMPILE_ERROR, SCAN_REJECTED)
REFUSED = "REFUSED"  # first word of the log of a build refused for a banned construct (status SCAN_REJECTED)


@dataclasses.dataclass
class CompileOutcome:
    """One build: whether it compiled, the shared library's path, the compiler log and the wall time it took.

    `status` is the verdict a failed build's candidates get: COMPILE_ERROR (it does not build; the default when a
    failed build names none) or SCAN_REJECTED (the compile farm refused the source for a banned construct before or
    after compiling it; the log says which). A build that compiled has status "".
    """

    ok: bool
    artifact: str = ""
    log: str = ""
    seconds: float = 0.0
    status: str = ""

    def __post_init__(self) -> None:
        if self.ok and self.status:
            raise ValueError(f"a build that compiled has no failure status (got {self.status!r})")
        if not self.ok:
            self.status = self.status or COMPILE_ERROR
            if self.status not in BUILD_FAILURES:
                raise ValueError(f"unknown build failure status {self.status!r}; one of {BUILD_FAILURES}")


class Backend(Protocol):
    """Compiles builds and evaluates (candidate, problem) pairs; the cuBLASLt baseline of each problem is timed
    inside `evaluate`, by the same judge, on the same GPU and buffers as the candidate."""

    def compile(self, candidates: list[Candidate]) -> dict[str, CompileOutcome]:
        """Builds each distinct `Candidate.build_key`; the outcome per build key."""

    def evaluate(self, requests: list[tuple[Candidate, Problem]]) -> list[EvalResult]:
        """Checks and times each compiled candidate on its problem; one result per request, in order. The build may
        have been compiled by an earlier process (the loop never recompiles a build key the store has): the backend
        finds its artifact by build key (e.g. in its artifacts folder). A backend may also offer
        `evaluate_iter(requests) -> Iterator[tuple[int, EvalResult]]`, the same verdicts as (request index, verdict)
        in the order they finish: the loop then stores each as it arrives (else when `evaluate` returns). A backend
        that can evaluate only some candidates (a replay of measured times) offers `measured_pool(problem) ->
        frozenset[str]`, the candidate ids it can evaluate there: the proposers then keep to them."""

    def prebuilt(self) -> set[str]:
        """Build keys that need no compile (the default kernels built into the extension's library): the loop
        records them as built and `evaluate` must run them from that library."""

    def environment(self) -> dict[str, Any]:
        """The evaluating GPU: gpu_name, arch (e.g. 90), capability [9, 0], sm_count, driver, cuda, ..."""

    def close(self) -> None:
        """Releases workers and GPUs."""


def in_request_order(verdicts: Iterable[tuple[int, EvalResult]], count: int) -> list[EvalResult]:
    """The verdicts of an `evaluate_iter` as `evaluate` returns them: one per request, in request order."""
    results: list[EvalResult | None] = [None] * count
    for index, result in verdicts:
        results[index] = result
    missing = [i for i, r in enumerate(results) if r is None]
    if missing:
        raise RuntimeError(f"the backend gave no verdict for {len(missing)} of {count} requests (first: {missing[0]})")
    return results
