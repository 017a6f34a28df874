"""Warm start: the rl policy fit to earlier measurements (sweep files, search stores) before a run proposes."""
from pathlib import Path

import numpy as np

from cudal2_testing.measure import shapes
from search import warm_start
from studies import budget_study
from search.candidate import Candidate, Problem
from search.loop import RunArgs, Search
from search.policy import Policy, features
from search.reward import FAILURE_REWARD
from search.simulate import SimulatedBackend
from search.store import Store

ROOT = Path(__file__).resolve().parent.parent
SM80 = "sm80_cute_fp16_nt_64x64x64_s3_w4"
SM90 = "sm90_tma_ws_fp16_nt_128x256x64_s0_c2x1_coop_persistent"


def sweep_doc(rows):
    return {"rows": [{"layout": "nt", "dtype": "fp16", "m": m, "n": n, "k": k, "baseline_us": 10.0,
                      "candidates": [dict(kernel=kern, us=us, correct=ok, splits=0, swizzle=0, raster=0)
                                     for kern, us, ok in cands]} for (m, n, k), cands in rows]}


def test_sweep_rows_become_rewarded_measurements():
    doc = sweep_doc([((64, 64, 256), [(SM80, 5.0, True), (SM90, 20.0, True), ("not_a_kernel", 1.0, True),
                                      (SM90, None, None)]),
                     ((4096, 4096, 4096), [(SM90, 8.0, False)])])
    got = {(p.m, c.config): value for p, c, value in warm_start.from_sweep(doc)}
    assert set(got) == {(64, SM80), (64, SM90), (4096, SM90)}  # the unknown kernel and the untimed one are dropped
    assert 1.9 < got[(64, SM80)] <= 2.0 and 0.4 < got[(64, SM90)] <= 0.5
    assert got[(4096, SM90)] == FAILURE_REWARD["incorrect"]


def test_the_fit_prefers_each_shapes_winners():
    small, large = (64, 64, 256), (4096, 4096, 4096)
    doc = sweep_doc([(small, [(SM80, 5.0, True), (SM90, 12.0, True)]),
                     (large, [(SM80, 30.0, True), (SM90, 8.0, True)])])
    policy = Policy(90, 0)
    assert warm_start.warm_start(policy, warm_start.from_sweep(doc)) == 4
    top = {s: policy.top_values(Problem("nt", "fp16", *s), 1)["family"][0][0] for s in (small, large)}
    assert top == {small: "sm80_cute", large: "sm90_tma_ws"}


def test_the_committed_h200_sweep_teaches_hopper_kernels_for_large_squares_only():
    """Among the families the sweep measured, Hopper kernels for a large square only; the tiny family (newer than
    the sweep: no evidence) keeps its prior probability."""
    policy = Policy(90, 0)
    large = Problem("nt", "fp16", 4096, 4096, 4096)
    tiny_prior = policy.top_values(large, 9)["family"]
    sweep = ROOT / "benchmarks" / "results" / "nvidia_h200" / "sweep_2026-11-23_cc51879.json.gz"
    assert warm_start.warm_start(policy, warm_start.load([sweep])) > 10000
    family = {m: dict(policy.top_values(Problem("nt", "fp16", m, m, m), 9)["family"]) for m in (64, 4096)}
    measured = {m: {f: p for f, p in family[m].items() if f != "tiny"} for m in family}
    assert max(measured[4096], key=measured[4096].get) == "sm90_tma_ws"
    assert measured[4096]["sm90_tma_ws"] > 0.9 * sum(measured[4096].values())
    assert max(measured[64], key=measured[64].get) != "sm90_tma_ws"
    assert abs(family[4096]["tiny"] - dict(tiny_prior)["tiny"]) < 0.05
    assert max(p for _, p in policy.top_values(large, 9)["sm90_tma_ws.tile_m"]) < 1


def test_warm_start_from_other_shapes_wins_at_four_evaluations_per_problem():
    """Simulated G1000: fit to a simulated sweep of 100 other shapes, the policy's first round over 60 new shapes
    (4 evaluations each) beats the cold policy and the sweep heuristic, on each of two seeds."""
    for seed in range(2):
        problems = [Problem("nt", "fp16", *s) for s in shapes.stratified_sample(shapes.g1000(), 60, seed)]
        others = [Problem("nt", "fp16", *s) for s in shapes.stratified_sample(shapes.g1000(), 160, seed + 100)]
        others = [p for p in others if p not in problems][:100]
        warm = budget_study.geomean_best(problems, seed, "rl", 4, budget_study.simulated_sweep(others, seed, 30))
        cold, sweep = (budget_study.geomean_best(problems, seed, policy, 4) for policy in ("rl", "sweep"))
        assert warm > max(cold, sweep) + 0.02, (seed, warm, cold, sweep)


def test_a_store_is_a_warm_start_source_and_the_run_records_it(tmp_path):
    problems = [Problem("nt", "fp16", *s) for s in shapes.stratified_sample(shapes.g1000(), 10, 0)]
    first = Store(tmp_path / "first.db")
    Search.start(first, SimulatedBackend(), RunArgs(policy="sweep", budget_evals=40), problems).run()
    first.close()
    measurements = warm_start.load([tmp_path / "first.db"])
    assert len(measurements) == 40 and all(m[1].config for m in measurements)
    store = Store(tmp_path / "second.db")
    args = RunArgs(policy="rl", budget_evals=20, warm_start=[str(tmp_path / "first.db")])
    search = Search.start(store, SimulatedBackend(), args, problems)
    assert search.policy.to_json()["weights"] != Policy(90, 0).to_json()["weights"]
    search.run()
    resumed = Search.resume(store, SimulatedBackend(), search.run_id, {"budget_evals": 30})
    assert resumed.args.warm_start == [str(tmp_path / "first.db")]
    store.close()


def test_budget_study_writes_its_table(tmp_path):
    out = tmp_path / "study.json"
    assert budget_study.main(["--out", str(out), "--shapes", "8", "--budgets", "2", "--seeds", "1", "--arch", "80",
                              "--warm-per-problem", "4"]) == 0
    text = out.with_suffix(".md").read_text()
    assert "Simulated A100-SXM4-80GB" in text and "| rl+warm |" in text and "2 evals/problem" in text


def test_unmeasured_choices_keep_the_prior_and_stay_above_measured_losers():
    """The H200 sweep never measured the swap-AB kernels that win H100 decode shapes: a warm start from it must not
    rank what it never measured below what it measured and found slow. Here one kernel at swizzle 0 (fastest) and 1
    (25% slower); swizzles 2..16 are never measured and keep their prior probability."""
    problem = Problem("nt", "fp16", 512, 512, 4096)
    kernel = "sm80_cute_fp16_nt_64x64x64_s3_w4"
    doc = sweep_doc([((problem.m, problem.n, problem.k), [(kernel, 5.0, True), (kernel, 6.25, True)])])
    doc["rows"][0]["candidates"][1]["swizzle"] = 1
    policy = Policy(90, 0)
    dim = "sm80_cute.swizzle"
    prior = dict(zip(policy.dims[dim], policy.probabilities(dim, features(problem))))
    assert warm_start.warm_start(policy, warm_start.from_sweep(doc)) == 2
    fitted = dict(zip(policy.dims[dim], policy.probabilities(dim, features(problem))))
    assert fitted[0] > fitted[2] > 1.5 * fitted[1]
    assert all(abs(fitted[v] - prior[v]) < 0.005 for v in (2, 4, 8, 16))


def test_a_kernel_the_source_never_measured_is_not_ranked_below_its_measured_losers():
    """An older sweep without swap-AB kernels finds Hopper kernels slow on a small shape: the fit pushes the Hopper
    family down there, but a swap-AB kernel it never measured is judged by the prior, so it ranks above the Hopper
    kernel measured slow (and in the pool draws too), and keeps the rank the cold policy gives it."""
    small = (256, 256, 2048)
    winner, loser = SM80, "sm90_tma_ws_fp16_nt_64x128x64_s0_c1x1_pingpong_persistent"
    unmeasured = Candidate(config="sm90_tma_ws_fp16_nt_64x16x128_s0_c1x1_pingpong_persistent_swap")
    problem = Problem("nt", "fp16", *small)
    policy = Policy(90, 0)
    cold = policy.preference(problem, unmeasured)
    shapes = [small] + [(m, n, 2048) for m in (128, 512) for n in (128, 512)]
    warm_start.warm_start(policy, warm_start.from_sweep(sweep_doc([(s, [(winner, 5.0, True), (loser, 8.0, True)])
                                                                   for s in shapes])))
    assert policy.fitted_configs == {winner, loser}
    measured_loser = Candidate(config=loser)
    assert policy.preference(problem, unmeasured) > policy.preference(problem, measured_loser)
    assert policy.log_probability(problem, unmeasured) > policy.log_probability(problem, measured_loser)
    assert policy.preference(problem, unmeasured) == cold
    assert Policy.from_json(policy.to_json()).fitted_configs == policy.fitted_configs


def test_the_stacked_fit_takes_each_dimensions_cross_entropy_step():
    """Policy.fit (every dimension of a step at once) ends where the same shuffled passes of one dimension's
    cross-entropy step at a time end: w += rate * outer(target - softmax(w phi), phi)."""
    import random  # noqa: PLC0415
    problems = [Problem("nt", "fp16", 64 * 2 ** i, 4096, 512 * 2 ** (i % 3)) for i in range(6)]
    reference = Policy(90)
    steps = [(p, {"family": {reference.dims["family"][i % len(reference.dims["family"])]: 1.0},
                  "sm80_cute.stages": {3: 0.7, 4: 0.3}}) for i, p in enumerate(problems)]
    order, rng = list(steps), random.Random(5)
    for _ in range(4):
        rng.shuffle(order)
        for problem, target in order:
            phi = features(problem)
            for dim, weights in target.items():
                goal = np.array([weights.get(v, 0.0) for v in reference.dims[dim]])
                reference.weights[dim] += 0.2 * np.outer(goal - reference.probabilities(dim, phi), phi)
    stacked = Policy(90)
    stacked.fit(list(steps), 0.2, 4, seed=5)
    for dim in reference.dims:
        assert np.allclose(stacked.weights[dim], reference.weights[dim], atol=1e-12), dim
    assert not np.allclose(stacked.weights["family"], Policy(90).weights["family"])
