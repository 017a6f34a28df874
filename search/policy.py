"""The learned search policy: a contextual factored softmax over the space's dimensions, plus elites per problem.

One categorical per dimension (the family, then each config field and knob of that family), with logits linear in
the problem's features (radial bases over log2 M, N, K, wave count of 128x128 tiles, arithmetic intensity, dtype,
layout): what is learned on one shape moves the logits of its neighbours. Initial logits are a prior: the log
frequency of each value among the families' built default kernels. Updated by REINFORCE with a per-problem baseline
(moving average of reward); the `ELITES` best measured candidates of each problem are kept for local search. With
an LLM in the loop (`llm_prior` > 0) the LLM is the policy's prior: each of its evaluated configs also pulls the
policy towards it (an imitation step, see `update`). The whole state is JSON (stored as snapshots for `resume`).
"""
from __future__ import annotations

import bisect
import collections
import itertools
import math
import random
from typing import Any

import numpy as np

from search.candidate import Candidate, Problem
from cudal2_catalog.codegen import default_configs
from cudal2_catalog.space import CONFIG_FIELDS, KNOB_FIELDS, family_space, families_for
from search.candidate_space import parse_point, point_of

SM_COUNT_FEATURE = 132          # waves are counted against an H100's SMs (a scale, not a device fact)
RBF_CENTRES = {"m": (4, 7, 10, 13), "n": (7, 10, 13), "k": (7, 10, 13)}
RBF_WIDTH = 1.8
ELITES = 4
LEARNING_RATE = 0.3
BASELINE_DECAY = 0.3            # weight of the newest reward in the per-problem moving average
PRIOR_WEIGHT = 1.0
LLM_PRIOR_TEMPERATURE = 0.05    # an LLM config this far below the problem's baseline reward is imitated e^-1 as much


def features(problem: Problem) -> np.ndarray:
    """The policy's context vector of a problem (bias first, then bases over log2 sizes, waves, intensity)."""
    logs = {"m": math.log2(problem.m), "n": math.log2(problem.n), "k": math.log2(problem.k)}
    phi = [1.0]
    for dim, centres in RBF_CENTRES.items():
        phi += [math.exp(-((logs[dim] - c) / RBF_WIDTH) ** 2) for c in centres]
    waves = math.ceil(problem.m / 128) * math.ceil(problem.n / 128) / SM_COUNT_FEATURE
    phi.append(math.tanh(math.log2(waves) / 4))
    intensity = problem.m * problem.n * problem.k / (problem.m * problem.k + problem.n * problem.k + problem.m *
                                                     problem.n)
    phi.append(math.log2(intensity) / 12)
    phi += [float(problem.dtype == "bf16"), float(problem.layout == "nt")]
    return np.array(phi)


FEATURES = len(features(Problem("nt", "fp16", 64, 64, 64)))


def dimensions(arch: int) -> dict[str, tuple]:
    """Every categorical of the policy on `arch`: "family", then "<family>.<field>" for each field and knob."""
    families = families_for(arch)
    dims: dict[str, tuple] = {"family": families}
    for family in families:
        fields, knobs = family_space(family)
        dims.update({f"{family}.{name}": fields[name] for name in CONFIG_FIELDS})
        dims.update({f"{family}.{name}": knobs[name] for name in KNOB_FIELDS})
    return dims


def _prior(dims: dict[str, tuple]) -> dict[str, np.ndarray]:
    """Initial weights: the bias column holds the log frequency of each value among the built default kernels."""
    counts: dict[str, collections.Counter] = collections.defaultdict(collections.Counter)
    for cfg in default_configs():
        counts["family"][cfg.family] += 1
        for name in CONFIG_FIELDS:
            counts[f"{cfg.family}.{name}"][getattr(cfg, name)] += 1
        for name in KNOB_FIELDS:
            counts[f"{cfg.family}.{name}"][0] += 1
    weights = {}
    for dim, values in dims.items():
        w = np.zeros((len(values), FEATURES))
        w[:, 0] = PRIOR_WEIGHT * np.log1p([counts[dim][v] for v in values])
        weights[dim] = w
    return weights


class Policy:
    """The contextual factored policy with per-problem baselines and elites (see the module docstring)."""

    def __init__(self, arch: int, seed: int = 0, temperature: float = 1.0, llm_prior: float = 0.0):
        self.arch = arch
        self.seed = seed
        self.temperature = temperature
        self.llm_prior = llm_prior
        self.dims = dimensions(arch)
        self.prior = _prior(self.dims)
        self.weights = {dim: w.copy() for dim, w in self.prior.items()}
        self.baselines: dict[str, float] = {}
        self.elites: dict[str, list[tuple[float, str]]] = {}  # problem key -> [(reward, candidate id)], best first
        self.updates = 0
        self.rng = random.Random(seed)
        self.fitted_configs: frozenset[str] | None = None  # the kernels a warm start measured (None: no warm start)

    def log_probabilities(self, dim: str, phi: np.ndarray, weights: dict[str, np.ndarray] | None = None) -> np.ndarray:
        """The log-softmax over `dim`'s values in context `phi` (finite however peaked the policy is), under the
        policy's weights or `weights`."""
        logits = (self.weights if weights is None else weights)[dim] @ phi / self.temperature
        logits -= logits.max()
        return logits - np.log(np.exp(logits).sum())

    def probabilities(self, dim: str, phi: np.ndarray) -> np.ndarray:
        """The softmax over `dim`'s values in context `phi`."""
        return np.exp(self.log_probabilities(dim, phi))

    def draws(self, problem: Problem) -> PolicyDraws:
        """Draws from the policy for `problem` under its weights as they are now (valid until the next update)."""
        return PolicyDraws(self, problem)

    def sample(self, problem: Problem, provenance: str = "policy") -> Candidate:
        """One point drawn from the policy for `problem` (not checked for feasibility)."""
        return self.draws(problem).sample(provenance)

    def preference(self, problem: Problem, candidate: Candidate) -> float:
        """How much the policy prefers a config candidate for `problem`: the sum over its choices of log(p(value) /
        p(most probable value)) (0 = the policy's mode; comparable across families with different numbers of
        dimensions and choices, unlike the log-probability). A kernel the warm start had no measurement of is
        judged by the prior (`judged_by`)."""
        phi = features(problem)
        weights = self.judged_by(candidate)
        total = 0.0
        for dim, value in self.choices(candidate):
            logp = self.log_probabilities(dim, phi, weights)
            total += float(logp[self.dims[dim].index(value)] - logp.max())
        return total

    def log_probability(self, problem: Problem, candidate: Candidate) -> float:
        """The log-probability that `sample(problem)` draws a config candidate's point (under the prior for a kernel
        the warm start had no measurement of, `judged_by`)."""
        phi = features(problem)
        weights = self.judged_by(candidate)
        return sum(float(self.log_probabilities(dim, phi, weights)[self.dims[dim].index(value)])
                   for dim, value in self.choices(candidate))

    def judged_by(self, candidate: Candidate) -> dict[str, np.ndarray]:
        """The weights that judge a config candidate: the policy's, or the prior's for a kernel a warm start fit
        the policy without measuring (the fit learned its family and fields from other kernels, e.g. that Hopper
        kernels lose on small shapes from an older GPU's sweep that had no swap-AB kernel: a kernel without
        evidence is ranked by the prior, not below the kernels measured slow)."""
        if self.fitted_configs is None or candidate.config in self.fitted_configs:
            return self.weights
        return self.prior

    def choices(self, candidate: Candidate) -> list[tuple[str, Any]]:
        """(dimension, value) of every choice a config candidate makes: its family, then its family's fields and
        knobs."""
        return self._choices(point_of(candidate))

    def _choices(self, point: dict[str, Any]) -> list[tuple[str, Any]]:
        """(dimension, value) of every choice a point makes."""
        family = point["family"]
        return [("family", family)] + [(f"{family}.{n}", point[n]) for n in (*CONFIG_FIELDS, *KNOB_FIELDS)]

    def update(self, problem: Problem, candidate: Candidate, reward: float) -> None:
        """One REINFORCE step on a config candidate's reward against the problem's moving-average baseline, and the
        problem's elites (source candidates only enter the elites). A config an LLM proposed (provenance "llm:...")
        is also imitated when `llm_prior` > 0: the LLM as the policy's prior (a step of the KL term towards the
        LLM's proposals), weighted `llm_prior` x exp(min(0, advantage) / LLM_PRIOR_TEMPERATURE), so that what the
        LLM proposes moves the policy unless its measurement says it is worse than this problem's usual."""
        key = problem.key
        self._add_elite(key, reward, candidate.id)
        if not candidate.config:
            return
        baseline = self.baselines.get(key)
        self.baselines[key] = reward if baseline is None else (1 - BASELINE_DECAY) * baseline + BASELINE_DECAY * reward
        if self.llm_prior and candidate.provenance.startswith("llm:"):
            below = min(0.0, reward - baseline) if baseline is not None else 0.0
            self.imitate_point(problem, candidate, self.llm_prior * math.exp(below / LLM_PRIOR_TEMPERATURE))
        if baseline is None:
            return
        advantage = max(-1.0, min(1.0, reward - baseline))
        phi = features(problem)
        point = point_of(candidate)
        for dim, value in self._choices(point):
            values = self.dims[dim]
            if len(values) < 2:
                continue
            grad = -self.probabilities(dim, phi)
            grad[values.index(value)] += 1.0
            self.weights[dim] += LEARNING_RATE * advantage * np.outer(grad, phi)
        self.updates += 1

    def imitate(self, problem: Problem, targets: dict[str, dict[Any, float]], learning_rate: float) -> None:
        """One cross-entropy step of each dimension's softmax towards a target distribution over its values for
        `problem` (the warm start's advantage-weighted fit; the step vanishes once the policy matches)."""
        self.fit([(problem, targets)], learning_rate, epochs=1)

    def fit(self, targets: list[tuple[Problem, dict[str, dict[Any, float]]]], learning_rate: float, epochs: int,
            seed: int = 0) -> None:
        """`epochs` passes of `imitate`'s step over (problem, targets) pairs in a seeded shuffled order, all
        dimensions of a step at once (each dimension's step touches its own weights only, so the dimensions' weights
        are stacked in one matrix: an offline fit of tens of thousands of measurements takes seconds)."""
        dims = list(self.dims)
        sizes = np.array([len(self.dims[d]) for d in dims])
        starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
        row = dict(zip(dims, starts))
        stacked = np.concatenate([self.weights[d] for d in dims])
        steps = []
        for problem, target in targets:
            goal, mask = np.zeros(len(stacked)), np.zeros(len(stacked))
            for dim, weights in target.items():
                q = np.zeros(len(self.dims[dim]))
                for value, weight in weights.items():
                    q[self.dims[dim].index(value)] += weight
                goal[row[dim]:row[dim] + len(q)] = q / q.sum()
                mask[row[dim]:row[dim] + len(q)] = 1.0
            steps.append((features(problem), goal, mask))
        rng = random.Random(seed)
        for _ in range(epochs):
            rng.shuffle(steps)
            for phi, goal, mask in steps:
                logits = stacked @ phi / self.temperature
                logits -= np.repeat(np.maximum.reduceat(logits, starts), sizes)
                p = np.exp(logits)
                p /= np.repeat(np.add.reduceat(p, starts), sizes)
                stacked += learning_rate * np.outer(mask * (goal - p), phi)
        for dim in dims:
            self.weights[dim] = stacked[row[dim]:row[dim] + len(self.dims[dim])].copy()

    def imitate_point(self, problem: Problem, candidate: Candidate, learning_rate: float) -> None:
        """One cross-entropy step of every multi-valued dimension towards a config candidate's choice for
        `problem` (`imitate` with one-hot targets)."""
        self.imitate(problem, {dim: {value: 1.0} for dim, value in self.choices(candidate)
                               if len(self.dims[dim]) > 1}, learning_rate)

    def _add_elite(self, key: str, reward: float, candidate_id: str) -> None:
        elites = [e for e in self.elites.get(key, []) if e[1] != candidate_id] + [(reward, candidate_id)]
        self.elites[key] = sorted(elites, key=lambda e: -e[0])[:ELITES]

    def top_values(self, problem: Problem, count: int = 3) -> dict[str, list[tuple[Any, float]]]:
        """The `count` most probable values of every multi-valued dimension for `problem` (what the policy learned)."""
        phi = features(problem)
        out = {}
        for dim, values in self.dims.items():
            if len(values) > 1:
                p = self.probabilities(dim, phi)
                out[dim] = [(values[i], round(float(p[i]), 3)) for i in np.argsort(-p)[:count]]
        return out

    def to_json(self) -> dict[str, Any]:
        """The whole state, JSON-able."""
        return {"arch": self.arch, "seed": self.seed, "temperature": self.temperature, "updates": self.updates,
                "llm_prior": self.llm_prior,
                "weights": {d: w.tolist() for d, w in self.weights.items()}, "baselines": self.baselines,
                "elites": {k: [list(e) for e in v] for k, v in self.elites.items()},
                "fitted_configs": None if self.fitted_configs is None else sorted(self.fitted_configs)}

    @classmethod
    def from_json(cls, doc: dict[str, Any]) -> "Policy":
        """A policy restored from `to_json` (its sampler reseeded from the seed and the update count)."""
        policy = cls(doc["arch"], doc["seed"] + doc["updates"], doc["temperature"], doc.get("llm_prior", 0.0))
        policy.seed = doc["seed"]
        policy.updates = doc["updates"]
        for dim, w in doc["weights"].items():
            if dim not in policy.weights or np.shape(w) != policy.weights[dim].shape:
                raise ValueError(f"policy snapshot dimension {dim!r} does not match the current space")
            policy.weights[dim] = np.array(w)
        policy.baselines = dict(doc["baselines"])
        policy.elites = {k: [(float(r), str(c)) for r, c in v] for k, v in doc["elites"].items()}
        fitted = doc.get("fitted_configs")
        policy.fitted_configs = None if fitted is None else frozenset(fitted)
        return policy


class PolicyDraws:
    """Draws from `policy` for one problem under the weights the policy has when this is made: each dimension's
    cumulative probabilities are computed at its first draw and kept (a proposer draws hundreds of points for a
    problem between two updates, most of them rejected as tried, infeasible or vetoed). The draws are those of
    computing the probabilities afresh each time, from the same random stream (`random.Random.choices` with the
    cumulative weights it would compute itself). Made anew after any update of the policy."""

    def __init__(self, policy: Policy, problem: Problem):
        self.policy, self.problem = policy, problem
        self.phi = features(problem)
        self.cumulative: dict[str, list[float]] = {}
        self.points: dict[tuple, Candidate] = {}   # the values drawn -> their candidate (parsed once)

    def draw(self, dim: str) -> Any:
        """One value of dimension `dim`: `random.Random.choices` of one with these cumulative weights, inline."""
        cumulative = self.cumulative.get(dim)
        if cumulative is None:
            cumulative = self.cumulative[dim] = list(itertools.accumulate(self.policy.probabilities(dim, self.phi)))
        return self.policy.dims[dim][bisect.bisect(cumulative, self.policy.rng.random() * (cumulative[-1] + 0.0), 0,
                                                   len(cumulative) - 1)]

    def sample(self, provenance: str = "policy") -> Candidate:
        """One point drawn from the policy (not checked for feasibility)."""
        family = self.draw("family")
        drawn = (family, provenance, *(self.draw(f"{family}.{name}") for name in (*CONFIG_FIELDS, *KNOB_FIELDS)))
        if drawn not in self.points:
            doc = {"family": family, "dtype": self.problem.dtype, "layout": self.problem.layout}
            doc.update(zip((*CONFIG_FIELDS, *KNOB_FIELDS), drawn[2:]))
            self.points[drawn] = parse_point(doc, provenance)
        return self.points[drawn]

    def mutate(self, candidate: Candidate) -> Candidate:
        """A config candidate with one of its choices (family kept) redrawn."""
        point = point_of(candidate)
        dims = [(dim, name) for dim, name in ((f"{point['family']}.{n}", n) for n in (*CONFIG_FIELDS, *KNOB_FIELDS))
                if len(self.policy.dims[dim]) > 1]
        dim, name = self.policy.rng.choice(dims)
        return parse_point({**point, name: self.draw(dim)}, candidate.provenance)
