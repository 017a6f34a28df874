"""ReplayBackend: real measured times from a committed sweep file, replayed as evaluations (the measured scorer of
`studies.budget_replay`).

A `python -m search.sweep` file holds, per problem, the kernel-mode times of the built kernels at default knobs and
of the knob grids of the two fastest, measured on one GPU with the cuBLASLt-autotune baseline of the same row. This
backend answers an evaluation with that measurement: OK with the measured time and the row's baseline, INCORRECT for
a candidate the sweep found wrong, UNSUPPORTED for one that declined the problem there. What the sweep did not
measure has no verdict here, so the search is restricted to the measured pool: `measured_pool(problem)` gives the
candidate ids the proposers may choose from (search.loop passes it to every proposer as `ProposalContext.pool`: a
proposal outside it is re-drawn, never evaluated), and `prebuilt()` the kernels the pool holds (with no build budget
the proposers keep to them). Replayed evaluations are real hardware timings, but of a restricted space: they can
rank proposers on how fast they find the best of the measured pool, not on anything outside it. Search stores
measured on the same GPU model (`stores`) widen the pools: each of their OK verdicts on a problem the sweep holds
joins it (where the sweep did not measure that candidate), its time scaled by the sweep row's bar over the verdict's
own paired bar, so that what the search itself measured (e.g. kernels the sweep never ran on large problems) can be
proposed again and scored as the GPU scored it.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Iterator

from cudal2_catalog.config import Knobs
from search.backend import CompileOutcome, in_request_order
from search.candidate import INCORRECT, OK, UNSUPPORTED, Candidate, EvalResult, Problem
from search.candidate_space import check
from search.store import read_store
from search.table_select import read_sweep


def sweep_arch(environment: dict[str, Any]) -> int:
    """The compute capability of a sweep's GPU as the search spells it (e.g. [9, 0] -> 90)."""
    major, minor = environment["capability"]
    return major * 10 + minor


class ReplayBackend:
    """The measurements of the sweep file at `path` as a backend (see the module docstring)."""

    def __init__(self, path: Path, stores: tuple[Path, ...] = ()):
        doc = read_sweep(Path(path))
        self.path = Path(path)
        self.arch = sweep_arch(doc["environment"])
        self._environment = {**doc["environment"], "arch": self.arch, "replay": str(path),
                             "protocol": doc.get("protocol", "")}
        self.baselines: dict[str, float] = {}
        self.problems: dict[str, Problem] = {}
        self.measured: dict[str, dict[str, dict]] = {}   # problem key -> candidate id -> the sweep's record
        for row in doc["rows"]:
            problem = Problem(row["layout"], row["dtype"], row["m"], row["n"], row["k"])
            if not row.get("baseline_us"):
                continue  # no baseline measured: nothing to score against
            self.baselines[problem.key] = row["baseline_us"]
            self.problems[problem.key] = problem
            records = self.measured.setdefault(problem.key, {})
            for c in row["candidates"]:
                cand = Candidate(config=c["kernel"], knobs=tuple(Knobs.from_dict(c)))
                if check(cand, problem, self.arch)[0]:
                    records[cand.id] = c
        for store in stores:
            self._add_store(Path(store), doc["environment"]["gpu_name"])

    def _add_store(self, path: Path, gpu_name: str) -> None:
        """The OK verdicts of the store at `path` joined to the pools of the sweep's problems (module docstring);
        ValueError when the store measured on another GPU model."""
        with read_store(path) as store:
            for run in store.runs():
                measured_on = json.loads(run["environment"] or "{}").get("gpu_name")
                if measured_on != gpu_name:
                    raise ValueError(f"{path.name} run {run['id']} measured on {measured_on}, the sweep on {gpu_name}")
            for row in store.evaluations():
                records = self.measured.get(row["problem_key"])
                if records is None or row["status"] != OK or not row["us"] or not row["baseline_us"]:
                    continue
                cand = store.candidate(row["candidate_id"])
                if cand.config and cand.id not in records:
                    scale = self.baselines[row["problem_key"]] / row["baseline_us"]
                    records[cand.id] = {"kernel": cand.config, "correct": True, "us": row["us"] * scale,
                                        "err": row["max_rel_err"], "from_store": path.name}

    def measured_problems(self, layout: str, dtype: str) -> list[Problem]:
        """The problems of `layout` / `dtype` with a baseline and at least one measured candidate, in file order."""
        return [p for key, p in self.problems.items()
                if (p.layout, p.dtype) == (layout, dtype) and self.measured.get(key)]

    def measured_pool(self, problem: Problem) -> frozenset[str]:
        """The candidate ids measured on `problem` (empty for a problem the file does not hold)."""
        return frozenset(self.measured.get(problem.key, {}))

    def best_speedup(self, problem: Problem) -> float:
        """The pool's best: the row's baseline over its fastest correct measured time."""
        times = [c["us"] for c in self.measured.get(problem.key, {}).values() if c.get("correct") and c.get("us")]
        return self.baselines[problem.key] / min(times) if times else 0.0

    def prebuilt(self) -> set[str]:
        """Every kernel the file measured: no build is ever needed."""
        return {cid.split("@")[0] for records in self.measured.values() for cid in records}

    def compile(self, candidates: list[Candidate]) -> dict[str, CompileOutcome]:
        """Only measured kernels are proposed (all prebuilt); another build is refused as a compile error."""
        return {c.build_key: CompileOutcome(False, log=f"{c.build_key} was not measured in {self.path.name}")
                for c in candidates}

    def evaluate(self, requests: list[tuple[Candidate, Problem]]) -> list[EvalResult]:
        """Verdicts in request order (see `evaluate_iter`)."""
        return in_request_order(self.evaluate_iter(requests), len(requests))

    def evaluate_iter(self, requests: list[tuple[Candidate, Problem]]) -> Iterator[tuple[int, EvalResult]]:
        """(request index, the sweep's measurement as a verdict); a request outside the pool is an error of the
        caller (the loop never sends one)."""
        for i, (cand, problem) in enumerate(requests):
            record = self.measured.get(problem.key, {}).get(cand.id)
            if record is None:
                raise KeyError(f"{cand.id} was not measured on {problem.key} in {self.path.name}")
            yield i, self._verdict(record, self.baselines[problem.key])

    def _verdict(self, record: dict, baseline_us: float) -> EvalResult:
        if record.get("correct") is False:
            return EvalResult(INCORRECT, reason=f"incorrect in {self.path.name}", gpu=self._environment)
        if not record.get("us"):
            return EvalResult(UNSUPPORTED, reason=f"not timed in {self.path.name} (declined the problem)",
                              gpu=self._environment)
        return EvalResult(OK, us=record["us"], baseline_us=baseline_us, case_speedups=[baseline_us / record["us"]],
                          max_rel_err=record.get("err") or 0.0, gpu=self._environment)

    def environment(self) -> dict[str, Any]:
        """The sweep's GPU environment, with `arch` and the replayed file."""
        return dict(self._environment)

    def close(self) -> None:
        """Nothing to release."""
