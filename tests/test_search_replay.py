"""The measured scorer: a sweep file replayed as a backend (search.backends.replay) and the budget study on it
(studies.budget_replay)."""
from __future__ import annotations

import json
from pathlib import Path

import pytest

from search.backends.replay import ReplayBackend
from search.candidate import INCORRECT, OK, UNSUPPORTED, Candidate, Problem
from search.errors import UserError
from search.loop import RunArgs, Search
from search.store import Store
from search.table_select import read_sweep
from studies import budget_curves, budget_replay

REPO = Path(__file__).resolve().parent.parent
H100_SWEEP = REPO / "benchmarks/results/nvidia_h100_80gb_hbm3/sweep_2026-11-25_a3fd6a0.json.gz"


@pytest.fixture(scope="module")
def small_sweep(tmp_path_factory) -> Path:
    """The committed H100 sweep cut to 6 fp16 NT problems, one candidate marked incorrect and one not timed."""
    doc = read_sweep(H100_SWEEP)
    rows = [r for r in doc["rows"] if (r["layout"], r["dtype"]) == ("nt", "fp16")][:6]
    rows[0]["candidates"][0] = {**rows[0]["candidates"][0], "correct": False}
    rows[0]["candidates"][1] = {**rows[0]["candidates"][1], "us": None}
    path = tmp_path_factory.mktemp("replay") / "sweep.json"
    path.write_text(json.dumps({**doc, "rows": rows}))
    return path


def test_replay_answers_with_the_measurement_and_only_inside_the_pool(small_sweep):
    backend = ReplayBackend(small_sweep)
    problem = backend.measured_problems("nt", "fp16")[0]
    row = next(r for r in read_sweep(small_sweep)["rows"] if (r["m"], r["n"], r["k"]) == (problem.m, problem.n,
                                                                                           problem.k))
    cands = [Candidate(config=c["kernel"], knobs=(c["splits"], c["swizzle"], c["raster"])) for c in row["candidates"]]
    assert {c.id for c in cands} >= backend.measured_pool(problem) and len(backend.measured_pool(problem)) > 2
    verdicts = backend.evaluate([(c, problem) for c in cands[:3]])
    assert [v.status for v in verdicts] == [INCORRECT, UNSUPPORTED, OK]
    assert verdicts[2].us == row["candidates"][2]["us"] and verdicts[2].baseline_us == row["baseline_us"]
    assert backend.environment()["arch"] == 90 and {c.config for c in cands} <= backend.prebuilt()
    outside = Candidate(config=cands[2].config, knobs=(7, 7, 7))
    with pytest.raises(KeyError, match="not measured"):
        backend.evaluate([(outside, problem)])


@pytest.mark.parametrize("policy", ["random", "rl", "sweep"])
def test_a_replayed_run_proposes_only_measured_candidates(small_sweep, policy):
    backend = ReplayBackend(small_sweep)
    problems = backend.measured_problems("nt", "fp16")
    store = Store(":memory:")
    search = Search.start(store, backend, RunArgs(policy=policy, budget_evals=8 * len(problems), max_builds=0),
                          problems)
    search.run()
    rows = store.evaluations(search.run_id)
    assert len(rows) == 8 * len(problems)
    assert all(r["candidate_id"] in backend.measured_pool(next(p for p in problems if p.key == r["problem_key"]))
               for r in rows)
    proposed = store.query("SELECT candidate_id, problem_key FROM proposals WHERE run_id = ?", (search.run_id,))
    pools = {p.key: backend.measured_pool(p) for p in problems}
    assert all(r["candidate_id"] in pools[r["problem_key"]] for r in proposed)


def test_a_shorter_budget_is_the_prefix_of_a_longer_run(small_sweep):
    """The study reads every budget off one run: the run at 4 per problem is the first evaluations of the run at 12."""
    backend = ReplayBackend(small_sweep)
    problems = backend.measured_problems("nt", "fp16")
    short = budget_replay.replay_run(backend, problems, "rl", 1, 4)
    long = budget_replay.replay_run(backend, problems, "rl", 1, 12)
    assert short == long[:4] and len(long) == 12
    assert all(a <= b for a, b in zip(long, long[1:]))  # the best found never gets worse
    assert long[-1] <= budget_replay.geomean([backend.best_speedup(p) for p in problems]) + 1e-12


def test_evals_to_reach_starts_at_one_round():
    assert budget_curves.evals_to_reach(0.9, [0.95, 0.5, 0.5, 0.8, 0.9, 1.0]) == 5
    assert budget_curves.evals_to_reach(1.1, [0.95, 1.0, 1.0, 1.0]) is None
    assert budget_curves.evals_to_reach(0.9, [0.95, 0.5], start=1) == 1


def test_warm_start_from_the_scored_gpu_is_refused(small_sweep):
    env = ReplayBackend(small_sweep).environment()
    with pytest.raises(UserError, match="leave-one-GPU-out"):
        budget_replay.check_leave_one_gpu_out(env, [H100_SWEEP], small_sweep)
    other = REPO / "benchmarks/results/nvidia_h200/sweep_2026-11-23_cc51879.json.gz"
    budget_replay.check_leave_one_gpu_out(env, [other], small_sweep)


def test_target_rows_judge_a_third_of_randoms_evaluations_and_99_percent():
    """Random climbs to 1.0 at 32 per problem; warm-from-other-GPU reaches 1.0 at 9 (within 32 / 3), warm-from-other-
    problems at 12 (not), cold rl never (99% of it at 20)."""
    ramp = [min(1.0, 0.5 + b / 64) for b in range(1, 33)]
    curves = {"g1000": {"random": [ramp, ramp],
                        "rl": [[min(0.995, 0.5 + b / 40) for b in range(1, 33)]] * 2,
                        "rl+warm (other GPU)": [[0.9 if b < 9 else 1.0 for b in range(1, 33)]] * 2,
                        "rl+warm (other problems)": [[0.99 if b < 12 else 1.0 for b in range(1, 33)]] * 2}}
    rows = {r[1]: r for r in budget_curves.target_rows(curves)}
    assert rows["rl+warm (other GPU)"][2:6] == ["1.0000", "9 of 32", "yes (<= 10)", "9"]
    assert rows["rl+warm (other problems)"][3:6] == ["12 of 32", "no (<= 10)", "4"]
    assert rows["rl"][3:6] == ["> 32", "no (<= 10)", "20"]
    assert rows["rl"][6] == str(budget_curves.evals_to_reach(0.99, ramp)) == "32"


def test_the_wave_study_runs_each_order_at_the_same_budget_and_counts_finds(small_sweep, tmp_path):
    """studies.wave_replay on the small sweep: whole rounds and waves each spend per-problem x problems evaluations;
    the finds it counts are problems whose best replayed speedup is over 1; the page has a row per setting."""
    from studies import wave_replay  # noqa: PLC0415
    backend = ReplayBackend(small_sweep)
    problems = backend.measured_problems("nt", "fp16")
    warm = budget_replay.warm_start.load([REPO / "benchmarks/results/nvidia_h200/sweep_2026-11-23_cc51879.json.gz"])
    whole = wave_replay.replay_table_search(backend, problems, warm, 0, 4, 4, None)
    waves = wave_replay.replay_table_search(backend, problems, warm, 0, 4, 4, 2)
    reachable = sum(backend.best_speedup(p) > 1.0 for p in problems)
    for result in (whole, waves):
        assert result["measured"] == len(problems) and 0 <= result["found_under_bar"] <= reachable
        assert result["geomean_best"] <= budget_replay.geomean([backend.best_speedup(p) for p in problems]) + 1e-12
    page = wave_replay.render({"header": {"gpu": "G", "scored": "s", "warm_from": ["w"], "problems": len(problems),
                                          "commit": "c", "command": "x", "wall_s": 1},
                               "runs": [{"seed": 0, "per_round": 4, "wave": None, **whole},
                                        {"seed": 0, "per_round": 4, "wave": 2, **waves}]})
    assert "| 4 | whole round |" in page and "| 4 | waves of 2 |" in page


def test_a_store_widens_the_pools_scaled_to_the_sweeps_bar(small_sweep, tmp_path):
    """A store's OK verdicts join the pools of a sweep that lacks them, each time scaled by the row's bar over the
    verdict's own bar; a store of another GPU model is refused."""
    backend = ReplayBackend(small_sweep)
    problems = backend.measured_problems("nt", "fp16")
    store = Store(tmp_path / "run.sqlite")
    search = Search.start(store, backend, RunArgs(policy="random", budget_evals=4 * len(problems), max_builds=0),
                          problems)
    search.run()
    row = next(r for r in store.evaluations(search.run_id) if r["status"] == OK)
    cand, key = store.candidate(row["candidate_id"]), row["problem_key"]
    store.close()
    doc = read_sweep(small_sweep)
    for sweep_row in doc["rows"]:
        if Problem(sweep_row["layout"], sweep_row["dtype"], sweep_row["m"], sweep_row["n"], sweep_row["k"]).key == key:
            sweep_row["candidates"] = [c for c in sweep_row["candidates"]
                                       if Candidate(config=c["kernel"], knobs=(c["splits"], c["swizzle"],
                                                                               c["raster"])).id != cand.id]
            sweep_row["baseline_us"] *= 2
    narrower = tmp_path / "narrower.json"
    narrower.write_text(json.dumps(doc))
    problem = next(p for p in problems if p.key == key)
    assert cand.id not in ReplayBackend(narrower).measured_pool(problem)
    widened = ReplayBackend(narrower, (tmp_path / "run.sqlite",))
    assert cand.id in widened.measured_pool(problem)
    (verdict,) = widened.evaluate([(cand, problem)])
    assert verdict.status == OK and verdict.us == pytest.approx(2 * row["us"])
    assert verdict.baseline_us / verdict.us == pytest.approx(row["baseline_us"] / row["us"])
    other_gpu = tmp_path / "other_gpu.json"
    other_gpu.write_text(json.dumps({**doc, "environment": {**doc["environment"], "gpu_name": "Another GPU"}}))
    with pytest.raises(ValueError, match="measured on"):
        ReplayBackend(other_gpu, (tmp_path / "run.sqlite",))


def test_the_evidence_near_a_problem_is_each_kernels_best_on_it_and_its_near_neighbours(small_sweep):
    """What vetoes a kernel (`ProposalContext.near_kernels`): its best measured speedup on the problem and on the
    problems within EVIDENCE_DISTANCE of it (64 x 64 x 64 has three at distance 1; 4096^3 and 8192^3 are far)."""
    from search.loop import EVIDENCE_DISTANCE, _distance  # noqa: PLC0415
    backend = ReplayBackend(small_sweep)
    problems = backend.measured_problems("nt", "fp16")
    store = Store(":memory:")
    search = Search.start(store, backend, RunArgs(policy="random", budget_evals=6 * len(problems), max_builds=0),
                          problems)
    search.run()
    small = next(p for p in problems if (p.m, p.n, p.k) == (64, 64, 64))
    near = {p.key for p in problems if _distance(p, small) <= EVIDENCE_DISTANCE}
    assert len(near) == 4
    expected: dict[str, float] = {}
    for row in store.evaluations(search.run_id):
        if row["status"] == OK and row["problem_key"] in near:
            config = store.candidate(row["candidate_id"]).config
            expected[config] = max(expected.get(config, 0.0), row["baseline_us"] / row["us"])
    assert search.context(small).near_kernels == pytest.approx(expected) and expected
