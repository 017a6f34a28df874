"""MemoBackend: a backend that judges each distinct (candidate, problem) once and serves that verdict again to every
later request for the same pair (studies.budget_hardware: several proposers on the same problems, one GPU judge).

Proposers compared at equal budget on real hardware each spend their own evaluations, but two proposers that pick
the same candidate for the same problem would otherwise have it timed twice, and the two timings differ by the GPU's
run-to-run noise. Serving the first verdict again saves the GPU time and compares the proposers on common
measurements (the same time for the same choice), which is fairer, not kinder: a reused verdict counts against the
budget of the run that requested it exactly as a fresh one. A reused verdict carries eval_s = 0, so a store's judged
evaluations (eval_s > 0) are the GPU's own. Verdicts recorded in earlier stores (`remember`) are served too, so a
study resumed in a later GPU call reuses what the earlier calls measured.
"""
from __future__ import annotations

import dataclasses
import json
from typing import Any, Iterator

from search.backend import in_request_order
from search.candidate import Candidate, EvalResult, Problem


class MemoBackend:
    """`inner`'s verdicts, each distinct (candidate id, problem key) judged once (see the module docstring); every
    other attribute is `inner`'s."""

    def __init__(self, inner):
        self.inner = inner
        self.verdicts: dict[tuple[str, str], EvalResult] = {}

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def remember(self, rows) -> None:
        """Adds verdicts a store recorded (its `evaluations` rows) to those served again."""
        for r in rows:
            self.verdicts.setdefault((r["candidate_id"], r["problem_key"]), EvalResult(
                r["status"], us=r["us"], baseline_us=r["baseline_us"], case_speedups=json.loads(r["case_speedups"]),
                max_rel_err=r["max_rel_err"], reason=r["reason"], gpu=json.loads(r["gpu"])))

    def evaluate(self, requests: list[tuple[Candidate, Problem]]) -> list[EvalResult]:
        """Verdicts in request order (see `evaluate_iter`)."""
        return in_request_order(self.evaluate_iter(requests), len(requests))

    def evaluate_iter(self, requests: list[tuple[Candidate, Problem]]) -> Iterator[tuple[int, EvalResult]]:
        """(request index, verdict): the remembered ones first (eval_s 0), then `inner`'s for the rest as they
        finish; a pair requested twice in one call is judged once."""
        fresh: dict[tuple[str, str], list[int]] = {}
        for i, (cand, problem) in enumerate(requests):
            key = (cand.id, problem.key)
            if key in self.verdicts:
                yield i, dataclasses.replace(self.verdicts[key], eval_s=0.0, compile_s=0.0)
            else:
                fresh.setdefault(key, []).append(i)
        firsts = [indices[0] for indices in fresh.values()]
        verdicts = (self.inner.evaluate_iter([requests[i] for i in firsts]) if hasattr(self.inner, "evaluate_iter")
                    else enumerate(self.inner.evaluate([requests[i] for i in firsts])))
        for j, result in verdicts:
            cand, problem = requests[firsts[j]]
            self.verdicts[(cand.id, problem.key)] = result
            indices = fresh[(cand.id, problem.key)]
            yield indices[0], result
            for i in indices[1:]:
                yield i, dataclasses.replace(result, eval_s=0.0, compile_s=0.0)
