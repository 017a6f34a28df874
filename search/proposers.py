"""The non-LLM proposers (random, the sweep heuristic, the learned policy) and the context every proposer gets.

A proposer answers `propose(problem, context, n) -> list[Proposal]`; the LLM proposer (search/llm/) speaks the same
protocol. Proposers avoid the candidates in `context.seen` (already proposed for the problem in this run).
"""
from __future__ import annotations

import dataclasses
import functools
import math
import random
from typing import Protocol

from search.candidate import Candidate, Problem, Proposal
from cudal2_catalog.codegen import default_configs, feasible
from cudal2_catalog.config import HgemmConfig
from cudal2_catalog.families import family_module
from search.policy import Policy
from search.candidate_space import check, neighbours, sample

MAX_DRAWS = 200  # draws per wanted proposal before a proposer gives up on finding a new feasible point
VETO_BELOW = 0.7  # PolicyProposer.veto_below's default: the share of the bar a kernel must reach near a problem


@dataclasses.dataclass
class Measured:
    """A measured candidate with its problem and result, as shown to proposers (contrastive examples)."""

    candidate: Candidate
    problem_key: str
    us: float
    speedup: float


@dataclasses.dataclass
class ProposalContext:
    """What a proposer knows about one problem: the GPU's arch, the fastest and slowest measured candidates of this
    problem and of its neighbouring problems (with times), the contextual-memory text, the ids already tried, and
    the build keys already built (all a proposer may use once `can_build` is False) and, when the backend can
    evaluate only some candidates (a replay of measured times), the ids it can: `pool` (None: the whole space).
    `near_kernels`: kernel -> the best speedup the run measured for it on this problem and its nearest neighbours
    (the evidence that vetoes a kernel, `PolicyProposer.veto_below`)."""

    arch: int
    best: list[Measured] = dataclasses.field(default_factory=list)
    worst: list[Measured] = dataclasses.field(default_factory=list)
    neighbour_best: list[Measured] = dataclasses.field(default_factory=list)
    near_kernels: dict[str, float] = dataclasses.field(default_factory=dict)
    memory: str = ""
    seen: set[str] = dataclasses.field(default_factory=set)
    built: set[str] = dataclasses.field(default_factory=set)
    can_build: bool = True   # False once the run's build budget is spent: only `built` build keys may be proposed
    pool: frozenset[str] | None = None  # the only candidate ids a proposer may return (None: no restriction)


class Proposer(Protocol):
    """Anything that proposes candidates for a problem."""

    def propose(self, problem: Problem, context: ProposalContext, n: int) -> list[Proposal]:
        """Up to `n` proposals for `problem`."""


def _fresh(cand: Candidate, problem: Problem, context: ProposalContext, taken: set[str]) -> bool:
    """Whether `cand` is new for this problem, in the backend's pool, buildable within the build budget and feasible
    on the arch (a proposer draws again when it is not)."""
    return (cand.id not in context.seen and cand.id not in taken and (context.pool is None or cand.id in context.pool)
            and (context.can_build or cand.build_key in context.built) and check(cand, problem, context.arch)[0])


@functools.lru_cache(maxsize=16)
def built_configs(built: frozenset[str], dtype: str, layout: str) -> list[HgemmConfig]:
    """The configs among build keys `built` of `dtype` and `layout`, sorted (parsed once per set of builds: a
    proposer restricted to built kernels draws from them many times)."""
    configs = sorted(HgemmConfig.from_name(key) for key in built if not key.startswith("src_"))
    return [c for c in configs if (c.dtype, c.layout) == (dtype, layout)]


def sample_built(rng: random.Random, problem: Problem, context: ProposalContext, provenance: str) -> Candidate | None:
    """A random already-built config of the problem's dtype and layout with random knobs (None if there is none)."""
    configs = built_configs(frozenset(context.built), problem.dtype, problem.layout)
    if not configs:
        return None
    cfg = rng.choice(configs)
    knobs = tuple(rng.choice(choices) for choices in family_module(cfg.family).KNOB_SPACE.values())
    return Candidate(config=cfg.name, knobs=knobs, provenance=provenance)


def knob_variants(config: str, problem: Problem, provenance: str) -> list[Candidate]:
    """Kernel `config` at each runtime knob variant its family's grid times on `problem` (the sweep's knob grid:
    the same build, other splits / swizzle / raster), the default knobs not included."""
    cfg = HgemmConfig.from_name(config)
    return [Candidate(config=config, knobs=tuple(k), provenance=provenance)
            for k in family_module(cfg.family).knob_grid(cfg, problem.m, problem.n, problem.k)]


def candidate_of_id(candidate_id: str, provenance: str) -> Candidate:
    """The config candidate a store id (`<config>@<splits>.<swizzle>.<raster>`) names."""
    config, knobs = candidate_id.split("@")
    return Candidate(config=config, knobs=tuple(int(x) for x in knobs.split(".")), provenance=provenance)


@dataclasses.dataclass
class RandomProposer:
    """Uniformly random feasible points (the baseline every learned proposer must beat)."""

    seed: int = 0
    provenance: str = "random"

    def __post_init__(self) -> None:
        self.rng = random.Random(self.seed)

    def propose(self, problem: Problem, context: ProposalContext, n: int) -> list[Proposal]:
        """`n` new random points (fewer when the space near exhausts); already-built kernels with random knobs once
        the build budget is spent."""
        out: list[Proposal] = []
        taken: set[str] = set()
        for _ in range(n * MAX_DRAWS):
            if len(out) == n:
                break
            if context.can_build:
                cand = dataclasses.replace(sample(self.rng, problem, context.arch), provenance=self.provenance)
            else:
                cand = sample_built(self.rng, problem, context, self.provenance)
            if cand is not None and _fresh(cand, problem, context, taken):
                taken.add(cand.id)
                out.append(Proposal(cand))
        return out


@dataclasses.dataclass
class SweepHeuristicProposer:
    """What `python -m search.sweep` does: every built default kernel of the problem's dtype/layout at default knobs,
    then the family knob grids of the 2 fastest measured; past that (a budget larger than the sweep), random points,
    so that comparisons run at equal evaluation budgets."""

    seed: int = 0
    knob_top: int = 2

    def __post_init__(self) -> None:
        self.fallback = RandomProposer(self.seed, provenance="sweep")

    def _queue(self, problem: Problem, context: ProposalContext) -> list[Candidate]:
        queue = [Candidate(config=cfg.name, provenance="sweep") for cfg in default_configs()
                 if (cfg.dtype, cfg.layout) == (problem.dtype, problem.layout)]
        if context.best:
            for measured in sorted(context.best, key=lambda m: m.us)[:self.knob_top]:
                queue += knob_variants(measured.candidate.config, problem, "sweep")
        return queue

    def propose(self, problem: Problem, context: ProposalContext, n: int) -> list[Proposal]:
        """The next `n` untried candidates of the sweep's order."""
        taken: set[str] = set()
        out = []
        for cand in self._queue(problem, context):
            if len(out) < n and _fresh(cand, problem, context, taken):
                taken.add(cand.id)
                out.append(Proposal(cand))
        seen = context.seen | taken
        if len(out) < n:
            out += self.fallback.propose(problem, dataclasses.replace(context, seen=seen), n - len(out))
        return out


@dataclasses.dataclass
class PolicyProposer:
    """The learned policy's proposals, of every `n`: up to `exploit` of them exploit the problem's elites (local
    search: first the untried runtime knob variants of the elites' kernels, best first, on the sweep's knob grid,
    which need no new build, in the order the policy prefers for the problem; then mutations of the elites, a `step`
    share moving one choice to an adjacent value, the others redrawing one choice from the policy); `sample` of them
    are drawn from the contextual policy; the rest are the untried points of a library (the built default kernels
    and the best candidates of neighbouring problems) that the policy prefers for this problem. A kernel the run
    measured below `veto_below` of the bar on this problem and each of its nearest neighbours where it ran
    (`ProposalContext.near_kernels`), at any knobs, is vetoed: proposed only when nothing else is left (the
    prior and a warm start that never measured it would otherwise rank it first on every problem: the H200 store
    `search_table_2026-11-27_af4df5c_fp16_nt.sqlite.gz` spent half its evaluations on two tiny kernels measured at
    0.08-0.6 of the bar on every problem of 2^28-2^29). On the simulated
    benchmark (the calibrated arch-90 model), 24 evaluations per problem, 40 G1000 shapes, seeds 0-2, the proposer
    before the knob-variant exploitation (commit 95f7dc5; not measured again since) gave a geomean best speedup of
    1.166 / 1.080 / 1.131 against the sweep heuristic's 0.950 / 0.953 / 0.977 and random search's 0.831 / 0.836 /
    0.856; without learning (learning rate 0) the same proposer reaches 1.014 / 1.022 / 1.099 (simulated figures:
    search/README.md, "What the simulator may be cited for")."""

    policy: Policy
    exploit: float = 0.5
    sample: float = 0.25
    step: float = 0.2
    veto_below: float = VETO_BELOW
    provenance: str = "policy"

    def vetoed(self, cand: Candidate, context: ProposalContext) -> bool:
        """Whether the run measured `cand`'s kernel near this problem and never at `veto_below` of the bar or more."""
        best = context.near_kernels.get(cand.config) if cand.config else None
        return best is not None and best < self.veto_below

    def _library(self, problem: Problem, context: ProposalContext) -> list[Candidate]:
        defaults = [Candidate(config=cfg.name, provenance=self.provenance) for cfg in default_configs()
                    if (cfg.dtype, cfg.layout) == (problem.dtype, problem.layout) and feasible(cfg, context.arch)[0]]
        transfer = [dataclasses.replace(m.candidate, provenance=self.provenance) for m in context.neighbour_best
                    if m.candidate.config]
        return sorted(defaults + transfer, key=lambda c: -self.policy.preference(problem, c))

    def _knob_variants_of_elites(self, problem: Problem, elites: list[Candidate]) -> list[Candidate]:
        """The elites' kernels, best elite's first, each at its default knobs and at its family's knob grid for
        `problem` (the same build: no compile), within a kernel the variants the policy prefers for this problem
        first (tried ones included: the caller skips them)."""
        out = []
        for config in dict.fromkeys(e.config for e in elites):
            variants = [Candidate(config=config, provenance=self.provenance)]
            variants += knob_variants(config, problem, self.provenance)
            out += sorted(variants, key=lambda c: -self.policy.preference(problem, c))
        return out

    def _draw_from_pool(self, problem: Problem, context: ProposalContext, take, wanted: int) -> None:
        """`wanted` draws of the policy restricted to the backend's pool: its untried members sampled without
        replacement in proportion to their probability under the policy (the policy conditioned on the pool, which
        drawing until a point lands in it approximates at far greater cost)."""
        members = [candidate_of_id(cid, self.provenance) for cid in sorted(context.pool - context.seen)]
        members = [c for c in members if not self.vetoed(c, context)] or members
        weights = [math.exp(self.policy.log_probability(problem, c)) for c in members]
        while wanted > 0 and members:
            i = self.policy.rng.choices(range(len(members)), weights=weights)[0] if sum(weights) > 0 else 0
            wanted -= take(members.pop(i))
            weights.pop(i)

    def propose(self, problem: Problem, context: ProposalContext, n: int) -> list[Proposal]:
        """`n` new feasible candidates (fewer if the policy keeps drawing tried or infeasible points)."""
        unfit: set[str] = set()   # drawn and not fresh (tried, out of the pool or the build budget, infeasible) or taken
        out: list[Candidate] = []

        def take(cand: Candidate, allow_vetoed: bool = False) -> bool:
            if cand.id in unfit:
                return False
            if not _fresh(cand, problem, context, unfit):
                unfit.add(cand.id)
                return False
            if allow_vetoed or not self.vetoed(cand, context):
                unfit.add(cand.id)
                out.append(cand)
                return True
            return False

        elites = [candidate_of_id(cid, self.provenance) for _, cid in self.policy.elites.get(problem.key, [])
                  if not cid.startswith("src_")]
        rng = self.policy.rng
        from_policy = self.policy.draws(problem)   # (no update while proposing)
        for cand in self._knob_variants_of_elites(problem, elites):
            if len(out) >= round(n * self.exploit):
                break
            take(cand, allow_vetoed=True)  # the problem's own best kernels: other knobs may rescue them
        for _ in range(MAX_DRAWS):
            if not elites or len(out) >= round(n * self.exploit):
                break
            elite = elites[min(int(rng.expovariate(1.0)), len(elites) - 1)]  # the best elite most often
            if rng.random() < self.step:
                any(take(cand) for cand in neighbours(elite, rng))
            else:
                take(from_policy.mutate(elite))
        draws = round(n * self.sample)
        library = self._library(problem, context)
        for cand in library:
            if len(out) >= n - draws:
                break
            take(cand)
        if context.pool is not None:
            self._draw_from_pool(problem, context, take, n - len(out))
        for _ in range(n * MAX_DRAWS if context.pool is None else 0):
            if len(out) >= n:
                break
            cand = from_policy.sample(self.provenance)
            if not context.can_build and cand.build_key not in context.built:
                cand = sample_built(rng, problem, context, self.provenance)  # build budget spent: built kernels
            if cand is not None:
                take(cand)
        for cand in library:  # nothing else left: the vetoed kernels, best preferred first
            if len(out) >= n:
                break
            take(cand, allow_vetoed=True)
        return [Proposal(c) for c in out]
