"""Warm start: the policy learns from earlier measurements before a run proposes anything.

With a few evaluations per problem, a run's first round is all the policy gets: a cold policy proposes from its
prior (the frequency of each choice among the default kernels, the same for every shape) and loses to the sweep's
fixed order. Measurements already made, on this GPU or another (the committed `python -m search.sweep` files, an
earlier search store), tell it which configs win on which shapes; `--warm-start FILE ...` replays them as policy
targets of an offline fit (per problem, each dimension's softmax is pulled towards the choices of its measured
candidates weighted by exp(reward / 0.05), smoothed); per-problem baselines and elites stay empty, so that the run's
own problems start from their own measurements. The fit speaks only for what the source measured: a choice none of
its candidates made on any problem (a kernel newer than the source, e.g. the swap-AB kernels an older GPU's sweep
predates) keeps the policy's prior instead of being pushed below the kernels the source measured and found slow,
and a kernel the source never measured is ranked by the prior (`Policy.judged_by`), not by the family and fields the
fit learned from other kernels.

On the simulated benchmark (`python -m studies.budget_study`: 100 G1000 shapes, seeds 0-2, warm start from a
simulated sweep of 100 other shapes; the calibrated arch-90 model, benchmarks/results/simulated/
budget_study_calibrated_2026-11-25.md; the fit and proposer of commit 95f7dc5, before unmeasured choices kept the
prior and before the knob-variant exploitation, not measured again since) the geomean best speedup at 4 / 8 / 24
evaluations per problem was 0.937 / 0.987 / 1.227 warm, 0.785 / 0.903 / 1.163 cold, 0.840 / 0.869 / 0.975 for the
sweep heuristic (simulated figures: search/README.md, "What the simulator may be cited for");
tests/test_search_warm_start.py checks the 4-evaluation gain on a smaller sample.
"""
from __future__ import annotations

import collections
import math
import zlib
from pathlib import Path

from cudal2_catalog.config import Knobs
from cudal2_ops.tables import parse_key
from search.candidate import INCORRECT, OK, Candidate, EvalResult, Problem
from search.errors import UserError
from search.policy import Policy, features
from search.reward import reward
from search.candidate_space import point_of
from search.store import Store, is_store_file, read_store
from search.table_select import read_sweep

Measurement = tuple[Problem, Candidate, float]  # a problem, a measured candidate, its reward
TEMPERATURE = 0.05  # reward scale of the fit's weights: a candidate 5% slower than the best weighs e^-1 as much
EPOCHS = 30
FIT_RATE = 0.2
SMOOTHING = 0.1     # a measured value's floor in a target: this share over the number of the dimension's values


def from_sweep(doc: dict) -> list[Measurement]:
    """The measurements of a `python -m search.sweep` results document (correct candidates rewarded with their
    speedup over the row's cuBLASLt-autotune time, incorrect ones as INCORRECT; kernels that are no config of
    today's space are left out)."""
    out = []
    for row in doc["rows"]:
        problem = Problem(row["layout"], row["dtype"], row["m"], row["n"], row["k"])
        for c in row["candidates"]:
            cand = Candidate(config=c["kernel"], knobs=Knobs.from_dict(c), provenance="warm-start")
            if c.get("correct") and c.get("us"):
                result = EvalResult(OK, us=c["us"], baseline_us=row["baseline_us"],
                                    case_speedups=[row["baseline_us"] / c["us"]], max_rel_err=c.get("err") or 0.0)
            elif c.get("correct") is False:
                result = EvalResult(INCORRECT)
            else:
                continue  # not timed (e.g. declined the problem)
            try:
                out.append((problem, cand, reward(result, cand)))
            except ValueError:
                continue  # no config of today's space
    return out


def measurements_of(store: Store, run_id: str | None = None) -> list[Measurement]:
    """The config evaluations of an open store (of one run, or all), with their stored rewards."""
    out = []
    for e in store.evaluations(run_id):
        cand = store.candidate(e["candidate_id"])
        if cand.config:
            out.append((Problem(*parse_key(e["problem_key"])), cand, e["reward"]))
    return out


def from_store(path: Path) -> list[Measurement]:
    """The config evaluations of the search store at `path` (or its .gz), with their stored rewards."""
    with read_store(path) as store:
        return measurements_of(store)


def load(paths: list[Path]) -> list[Measurement]:
    """Measurements from sweep files (.json / .json.gz) and search stores (.sqlite / .db, or their .gz); UserError
    naming a file that is neither."""
    out: list[Measurement] = []
    for path in map(Path, paths):
        if is_store_file(path):
            out += from_store(path)  # StoreError names what is wrong with a store
            continue
        try:
            out += from_sweep(read_sweep(path))
        except (OSError, EOFError, zlib.error, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise UserError(f"--warm-start {path}: not a sweep results file (.json or .json.gz of python -m "
                            f"search.sweep): {type(exc).__name__}: {exc}") from None
    return out


def known_to(policy: Policy, cand: Candidate) -> bool:
    """Whether every choice of a config candidate is a value of the policy's space (its arch and today's grid)."""
    try:
        point = point_of(cand)
    except ValueError:
        return False
    family = point["family"]
    if family not in policy.dims["family"]:
        return False
    return all(point[name] in policy.dims[f"{family}.{name}"] for name in point if f"{family}.{name}" in policy.dims)


def targets(policy: Policy, problem: Problem, measured: list[tuple[Candidate, float]],
            known: dict[str, set]) -> dict[str, dict]:
    """Per dimension, the fit's target distribution over its values for `problem`. The values of `known` (chosen by
    some measured candidate of the source, on any problem) share the probability the policy gives them now,
    weighting each candidate measured on this problem by exp((reward - best reward) / TEMPERATURE) (the family over
    all candidates, a family's fields over its own), with a floor of SMOOTHING / (the dimension's values) each so
    that the fit keeps exploring them (a known value not measured here, e.g. a kernel that declined the problem,
    gets the floor). A value the source never measured keeps the probability the policy gives it now: no evidence,
    no step (a kernel newer than the source's sweep is not pushed below what the sweep found slow). A dimension
    with fewer than two known values has no contrast and no target."""
    best = max(value for _, value in measured)
    out: dict[str, dict] = collections.defaultdict(lambda: collections.defaultdict(float))
    for cand, value in measured:
        weight = math.exp((value - best) / TEMPERATURE)
        for dim, choice in policy.choices(cand):
            out[dim][choice] += weight
    phi = features(problem)
    full = {}
    for dim, t in out.items():
        values = policy.dims[dim]
        if len(known[dim]) < 2:
            continue
        now = dict(zip(values, policy.probabilities(dim, phi)))
        share = sum(now[v] for v in known[dim])
        floor = SMOOTHING / len(values)
        total = sum(t.values())
        full[dim] = {v: share * ((1 - floor * len(known[dim])) * t.get(v, 0.0) / total + floor)
                     if v in known[dim] else now[v] for v in values}
    return full


def warm_start(policy: Policy, measurements: list[Measurement], seed: int = 0) -> int:
    """Fits the policy to `measurements` (those its space can express): EPOCHS passes over their problems in a
    seeded shuffled order, each a step towards the advantage-weighted choice distribution of the problem's
    measured candidates (an offline fit: unlike replaying policy-gradient steps it converges instead of
    saturating). Per-problem baselines and elites stay empty; the kernels measured join `policy.fitted_configs`
    (a kernel outside them is judged by the prior, `Policy.judged_by`). Returns how many measurements were used."""
    by_problem: dict[Problem, list[tuple[Candidate, float]]] = collections.defaultdict(list)
    used = 0
    for problem, cand, value in measurements:
        if known_to(policy, cand):
            by_problem[problem].append((cand, value))
            used += 1
    known: dict[str, set] = collections.defaultdict(set)
    for measured in by_problem.values():
        for cand, _ in measured:
            for dim, choice in policy.choices(cand):
                known[dim].add(choice)
    fitted = [(problem, targets(policy, problem, measured, known)) for problem, measured in by_problem.items()]
    policy.fitted_configs = (policy.fitted_configs or frozenset()) | {cand.config for measured in by_problem.values()
                                                                      for cand, _ in measured}
    policy.fit(fitted, FIT_RATE, EPOCHS, seed)
    return used
