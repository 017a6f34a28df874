"""The contextual policy (learning, transfer, elites, JSON state) and the RL policy against random search and the
sweep heuristic on the simulated benchmark, at equal evaluation budget."""
import json
import random

import numpy as np
import pytest

from cudal2_testing.measure import shapes
from search import candidate_space as space
from search.candidate import Candidate, Problem
from cudal2_testing.measure.summary import geomean
from search.loop import RunArgs, Search
from search.policy import Policy, features
from search.simulate import SimulatedBackend
from search.store import Store

SMALL = Problem("nt", "fp16", 64, 4096, 4096)
NEAR = Problem("nt", "fp16", 128, 4096, 4096)
FAR = Problem("nt", "fp16", 16384, 16384, 256)


def _family_point(policy: Policy, problem: Problem, family: str) -> Candidate:
    rng = random.Random(0)
    while True:
        cand = space.sample(rng, problem, 90)
        if cand.config.startswith(family):
            return cand


def test_rewarded_choices_gain_probability_and_transfer_to_neighbouring_shapes():
    policy = Policy(90, seed=0)
    decode = _family_point(policy, SMALL, "decode")
    before = {p.key: policy.probabilities("family", features(p))[policy.dims["family"].index("decode")]
              for p in (SMALL, NEAR, FAR)}
    policy.update(SMALL, _family_point(policy, SMALL, "sm80_cute"), 0.5)  # sets the baseline
    for _ in range(10):
        policy.update(SMALL, decode, 1.5)
    after = {p.key: policy.probabilities("family", features(p))[policy.dims["family"].index("decode")]
             for p in (SMALL, NEAR, FAR)}
    assert after[SMALL.key] > before[SMALL.key] + 0.2
    assert after[NEAR.key] - before[NEAR.key] > after[FAR.key] - before[FAR.key]


def test_elites_keep_the_best_candidates_per_problem():
    policy = Policy(90)
    cands = [space.sample(random.Random(s), SMALL, 90) for s in range(8)]
    for i, cand in enumerate(cands):
        policy.update(SMALL, cand, float(i))
    assert [cid for _, cid in policy.elites[SMALL.key]] == [c.id for c in cands[::-1][:4]]


def test_state_round_trips_through_json():
    policy = Policy(90, seed=3)
    for s in range(5):
        policy.update(SMALL, space.sample(random.Random(s), SMALL, 90), s / 4)
    restored = Policy.from_json(json.loads(json.dumps(policy.to_json())))
    for dim in policy.dims:
        assert np.allclose(restored.probabilities(dim, features(NEAR)), policy.probabilities(dim, features(NEAR)))
    assert restored.elites == policy.elites and restored.baselines == policy.baselines


def test_snapshot_of_another_space_is_refused():
    doc = Policy(90).to_json()
    doc["weights"]["family"] = [[0.0]]
    with pytest.raises(ValueError, match="family"):
        Policy.from_json(doc)


def _geomean_best(policy: str, problems: list[Problem], per_problem: int, seed: int) -> float:
    store = Store(":memory:")
    args = RunArgs(policy=policy, budget_evals=per_problem * len(problems), seed=seed)
    search = Search.start(store, SimulatedBackend(seed=seed), args, problems)
    search.run()
    assert store.evaluation_count(search.run_id) == args.budget_evals
    best = search.best_speedups()
    return geomean([best.get(p.key, 0.01) for p in problems])


def test_rl_beats_random_and_the_sweep_heuristic_at_equal_budget():
    """40 simulated G1000 shapes, 24 evaluations each, 3 seeds: mean over seeds of the geomean best speedup."""
    scores = {policy: [] for policy in ("rl", "random", "sweep")}
    for seed in range(3):
        problems = [Problem("nt", "fp16", *s) for s in shapes.stratified_sample(shapes.g1000(), 40, seed)]
        for policy in scores:
            scores[policy].append(_geomean_best(policy, problems, 24, seed))
    mean = {policy: sum(v) / len(v) for policy, v in scores.items()}
    assert mean["rl"] > mean["sweep"] + 0.005, scores
    assert mean["rl"] > mean["random"] + 0.1, scores
    assert min(r - s for r, s in zip(scores["rl"], scores["sweep"])) > -0.005, scores


def test_the_policy_samples_the_code_level_fields():
    """Each code-level field of sm80_cute is a dimension the policy draws: off-default values come up (their prior is
    lower: no default kernel uses them), and a mutation can move one."""
    policy = Policy(90, seed=1)
    for field in ("reg_pipeline", "smem_prefetch", "stagger_ab", "epilogue"):
        assert len(policy.dims[f"sm80_cute.{field}"]) > 1
    points = [space.point_of(policy.sample(SMALL)) for _ in range(400)]
    sm80 = [p for p in points if p["family"] == "sm80_cute"]
    assert sm80
    assert any(p["reg_pipeline"] != 2 for p in sm80) and any(p["smem_prefetch"] for p in sm80)
    assert any(p["stagger_ab"] for p in sm80) and any(p["epilogue"] == "nosmem" for p in sm80)
    assert all(p["reg_pipeline"] == 2 and not p["stagger_ab"] for p in points if p["family"] != "sm80_cute")


def test_draws_kept_for_a_problem_are_those_of_computing_the_probabilities_for_every_draw():
    """`Policy.draws` keeps each dimension's cumulative probabilities for the problem; the points it draws are those
    of drawing each dimension with `random.choices` over probabilities computed afresh, from the same random state."""
    from cudal2_catalog.space import CONFIG_FIELDS, KNOB_FIELDS
    policy = Policy(arch=90, seed=5)
    for s in range(8):   # weights off the prior, so that the context matters
        policy.update(SMALL, space.sample(random.Random(s), SMALL, 90), s / 4)
    rng = random.Random(11)
    policy.rng.setstate(rng.getstate())

    def draw_afresh(dim: str):
        p = policy.probabilities(dim, features(SMALL))
        return policy.dims[dim][rng.choices(range(len(p)), weights=p)[0]]

    draws = policy.draws(SMALL)
    for _ in range(60):
        family = draw_afresh("family")
        doc = {"family": family, "dtype": SMALL.dtype, "layout": SMALL.layout}
        doc.update({name: draw_afresh(f"{family}.{name}") for name in (*CONFIG_FIELDS, *KNOB_FIELDS)})
        assert draws.sample("policy") == space.parse_point(doc, "policy")
