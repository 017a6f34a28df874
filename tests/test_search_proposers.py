"""The policy proposer's local exploitation: once a problem has measured candidates, its exploit share goes first to
the untried runtime knob variants (the family's knob grid) of the elites' kernels, best kernel first, in the order
the policy prefers."""
from cudal2_catalog.families import knob_grid
from search.candidate import Candidate, Problem
from search.policy import Policy
from search.proposers import PolicyProposer, ProposalContext, knob_variants

PROBLEM = Problem("nt", "fp16", 512, 512, 4096)
BEST = "sm80_cute_fp16_nt_64x64x64_s3_w4"
SECOND = "sm80_cute_fp16_nt_128x128x32_s4_w4"


def measured_policy() -> Policy:
    """A policy whose elites for PROBLEM are BEST (faster) and SECOND at default knobs, taught to prefer 4 splits
    for this problem."""
    policy = Policy(90, seed=0)
    policy.update(PROBLEM, Candidate(config=SECOND), 1.0)
    policy.update(PROBLEM, Candidate(config=BEST), 1.2)
    for _ in range(5):
        policy.imitate(PROBLEM, {"sm80_cute.splits": {4: 1.0}}, 1.0)
    return policy


def test_knob_variants_are_the_familys_grid_of_one_build():
    variants = knob_variants(BEST, PROBLEM, "policy")
    assert [c.knobs for c in variants] == [tuple(k) for k in knob_grid(BEST, PROBLEM.m, PROBLEM.n, PROBLEM.k)]
    assert {c.build_key for c in variants} == {Candidate(config=BEST).build_key} and len(variants) > 4


def test_the_exploit_share_goes_to_the_best_kernels_untried_knob_variants_preferred_first():
    policy = measured_policy()
    seen = {Candidate(config=BEST).id, Candidate(config=SECOND).id}
    proposals = PolicyProposer(policy, exploit=0.5).propose(PROBLEM, ProposalContext(90, seen=seen), 4)
    first, second = (p.candidate for p in proposals[:2])
    assert first.config == BEST and first.knobs == (4, 0, 0)   # the variant the policy prefers
    assert second.config == BEST and second.id not in seen
    assert second.knobs in {tuple(k) for k in knob_grid(BEST, PROBLEM.m, PROBLEM.n, PROBLEM.k)}


def test_the_next_kernels_variants_follow_once_the_best_kernels_are_tried():
    policy = measured_policy()
    seen = {c.id for c in knob_variants(BEST, PROBLEM, "x")} | {Candidate(config=BEST).id, Candidate(config=SECOND).id}
    proposals = PolicyProposer(policy, exploit=0.5).propose(PROBLEM, ProposalContext(90, seen=seen), 4)
    assert [(p.candidate.config, p.candidate.knobs) for p in proposals[:2]][0] == (SECOND, (4, 0, 0))
    assert proposals[1].candidate.config == SECOND


def test_no_measurement_no_exploitation():
    """Before a problem has elites the proposals are the library's and the policy's (no knob variants first)."""
    proposals = PolicyProposer(Policy(90, seed=0), exploit=0.5).propose(PROBLEM, ProposalContext(90), 4)
    assert len(proposals) == 4 and all(p.candidate.knobs == (0, 0, 0) for p in proposals[:3])


def _first_library_kernel(context: ProposalContext) -> str:
    """The config the policy's library puts first for PROBLEM (what a cold policy proposes first)."""
    return PolicyProposer(Policy(90, seed=0))._library(PROBLEM, context)[0].config


def test_a_kernel_measured_far_below_the_bar_nearby_is_vetoed():
    """The prior ranks a kernel first on every problem however the run measured it; once the run measured it below
    veto_below on this problem and its neighbours, the library passes it over, and a kernel measured near the bar
    anywhere near is kept."""
    top = _first_library_kernel(ProposalContext(90))
    vetoed = PolicyProposer(Policy(90, seed=0)).propose(PROBLEM, ProposalContext(90, near_kernels={top: 0.3}), 4)
    assert len(vetoed) == 4 and top not in {p.candidate.config for p in vetoed}
    kept = PolicyProposer(Policy(90, seed=0)).propose(PROBLEM, ProposalContext(90, near_kernels={top: 0.9}), 4)
    assert top in {p.candidate.config for p in kept}


def test_a_vetoed_kernel_is_still_proposed_when_nothing_else_is_left():
    """With the build budget spent and one kernel built, the vetoed kernel fills the proposals rather than none."""
    top = _first_library_kernel(ProposalContext(90))
    context = ProposalContext(90, near_kernels={top: 0.3}, can_build=False, built={Candidate(config=top).build_key})
    proposals = PolicyProposer(Policy(90, seed=0)).propose(PROBLEM, context, 2)
    assert proposals and {p.candidate.config for p in proposals} == {top}


def test_a_proposal_call_computes_each_dimensions_probabilities_once_however_many_points_it_draws():
    """A call whose draws all fail (the build budget spent and nothing built: no drawn point may be proposed) draws
    its whole allowance of points but computes each dimension's softmax at most once."""
    problem = Problem("nt", "fp16", 64, 64, 64)
    policy = Policy(90, seed=1)
    computed = []
    probabilities = policy.probabilities
    policy.probabilities = lambda dim, phi: computed.append(dim) or probabilities(dim, phi)
    drawn = []
    draws = policy.draws
    policy.draws = lambda p: drawn.append(draws(p)) or drawn[-1]
    proposer = PolicyProposer(policy)
    assert proposer.propose(problem, ProposalContext(90, can_build=False), 4) == []
    points = sum(len(d.points) for d in drawn)
    assert points > 20, points   # the call drew many distinct points
    assert len(computed) == len(set(computed)) <= len(policy.dims)
