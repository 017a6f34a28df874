"""Search candidates as points of the kernel space (`cudal2_catalog.space`): parse, spell, check, sample and step.

The catalog knows configs and knobs; this module adds what the search attaches to them: the problem a candidate must
match and the proposer that named it (provenance).
"""
from __future__ import annotations

import random
from typing import Any

from cudal2_catalog import space
from cudal2_catalog.config import HgemmConfig, Knobs
from cudal2_catalog.families import declines
from search.candidate import Candidate, Problem


def _candidate(point: space.Point, provenance: str) -> Candidate:
    cfg, knobs = point
    return Candidate(config=cfg.name, knobs=knobs, provenance=provenance)


def parse_point(doc: dict, provenance: str) -> Candidate:
    """The candidate a JSON point spells (see `cudal2_catalog.space.parse_point`; ValueError names a bad field)."""
    return _candidate(space.parse_point(doc), provenance)


def point_of(candidate: Candidate) -> dict[str, Any]:
    """The JSON point of a config candidate (inverse of parse_point); ValueError for a source candidate."""
    if not candidate.config:
        raise ValueError("a source candidate is not a point of the space")
    return space.point_of(HgemmConfig.from_name(candidate.config), Knobs(*candidate.knobs))


def check(candidate: Candidate, problem: Problem, arch: int) -> tuple[bool, str]:
    """Whether a candidate may be compiled and evaluated for `problem` on compute capability `arch`: a config must
    match the problem's dtype and layout, be feasible (the family's check) and have knobs in the family's space.
    Source candidates pass here (the static scan and the compiler judge them)."""
    if not candidate.config:
        return True, ""
    try:
        cfg = HgemmConfig.from_name(candidate.config)
    except ValueError as err:
        return False, str(err)
    if (cfg.dtype, cfg.layout) != (problem.dtype, problem.layout):
        return False, f"kernel is {cfg.dtype}/{cfg.layout}, the problem {problem.dtype}/{problem.layout}"
    if why := declines(cfg, problem.m, problem.n, problem.k):
        return False, why
    return space.check(cfg, Knobs(*candidate.knobs), arch)


def sample(rng: random.Random, problem: Problem, arch: int, max_tries: int = 1000) -> Candidate:
    """A uniformly random feasible candidate for `problem` on `arch` whose kernel does not decline the problem's size
    (provenance "random"); RuntimeError when `max_tries` draws found none."""
    for _ in range(max_tries):
        point = space.sample(rng, problem.dtype, problem.layout, arch, max_tries)
        if not declines(point[0], problem.m, problem.n, problem.k):
            return _candidate(point, "random")
    raise RuntimeError(f"no {problem.key} candidate on sm{arch} in {max_tries} random draws runs the problem")


def neighbours(candidate: Candidate, rng: random.Random) -> list[Candidate]:
    """Every candidate one step away from a config candidate (one field or knob moved to an adjacent choice),
    shuffled; feasibility is not checked (use `check`). Provenance is kept."""
    if not candidate.config:
        raise ValueError("a source candidate is not a point of the space")
    points = space.neighbours(HgemmConfig.from_name(candidate.config), Knobs(*candidate.knobs), rng)
    return [_candidate(p, candidate.provenance) for p in points]
