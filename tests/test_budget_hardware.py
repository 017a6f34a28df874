"""The live equal-budget study (studies.budget_hardware) and its common-measurement backend (search.backends.memo),
on the simulated judge."""
from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from search.backends.memo import MemoBackend
from search.candidate import OK, Candidate, EvalResult, Problem
from search.loop import RunArgs, Search
from search.store import Store
from studies import budget_hardware

REPO = Path(__file__).resolve().parent.parent
H100_SWEEP = REPO / "benchmarks/results/nvidia_h100_80gb_hbm3/sweep_2026-11-25_a3fd6a0.json.gz"
H200_SWEEP = REPO / "benchmarks/results/nvidia_h200/sweep_2026-11-23_cc51879.json.gz"


class CountingJudge:
    """A judge that answers OK with a time that grows with every call, and counts its requests."""

    def __init__(self):
        self.judged: list[tuple[str, str]] = []

    def evaluate_iter(self, requests):
        for i, (cand, problem) in enumerate(requests):
            self.judged.append((cand.id, problem.key))
            yield i, EvalResult(OK, us=10.0 + len(self.judged), baseline_us=12.0, eval_s=0.5)

    def close(self):
        pass


def test_memo_judges_each_pair_once_and_serves_its_verdict_again():
    inner = CountingJudge()
    memo = MemoBackend(inner)
    p, q = Problem("nt", "fp16", 64, 64, 64), Problem("nt", "fp16", 128, 64, 64)
    a, b = Candidate(config="k1"), Candidate(config="k2")
    first = memo.evaluate([(a, p), (b, p), (a, p), (a, q)])
    assert inner.judged == [(a.id, p.key), (b.id, p.key), (a.id, q.key)]
    assert first[2].us == first[0].us and first[2].eval_s == 0.0 and first[0].eval_s == 0.5
    again = memo.evaluate([(b, p)])
    assert len(inner.judged) == 3 and again[0].us == first[1].us and again[0].eval_s == 0.0
    memo.close()   # (the inner backend's)


def test_memo_serves_what_a_store_recorded():
    store = Store(":memory:")
    problems = [Problem("nt", "fp16", 64, 64, 64), Problem("nt", "fp16", 256, 128, 64)]
    from search.simulate import SimulatedBackend
    search = Search.start(store, SimulatedBackend(seed=0), RunArgs(policy="random", budget_evals=8, max_builds=0),
                          problems)
    search.run()
    rows = store.evaluations(search.run_id)
    memo = MemoBackend(CountingJudge())
    memo.remember(rows)
    requests = [(store.candidate(r["candidate_id"]), next(p for p in problems if p.key == r["problem_key"]))
                for r in rows]
    verdicts = memo.evaluate(requests)
    assert memo.inner.judged == [] and [v.status for v in verdicts] == [r["status"] for r in rows]
    assert [v.us for v in verdicts] == [r["us"] for r in rows]


def study_args(tmp_path: Path, minutes: float, store: str = "stores") -> list[str]:
    return ["--backend", "sim", "--store-dir", str(tmp_path / store), "--out", str(tmp_path / f"{store}.json"),
            "--shapes", "6", "--per-problem", "5", "--sets", "g1000", "--minutes", str(minutes),
            "--warm-from", str(H100_SWEEP), str(H200_SWEEP)]


def test_the_study_compares_every_proposer_at_equal_budget(tmp_path):
    assert budget_hardware.main(study_args(tmp_path, 5)) == 0
    doc = json.loads((tmp_path / "stores.json").read_text())
    assert set(doc["curves"]["g1000"]) == set(budget_hardware.PROPOSERS)
    for record in doc["runs"].values():
        assert record["evaluations"] == record["budget"] == 30 and record["complete"]
        assert record["judged"] <= record["evaluations"]
        by_bucket = record["judge_s_by_bucket"]   # where the judge's time went, by size: every judged evaluation
        assert sum(n for n, _ in by_bucket.values()) == record["judged"] and all(t >= 0 for _, t in by_bucket.values())
    for per_seed in doc["curves"]["g1000"].values():
        curve = per_seed[0]
        assert len(curve) == 5 and all(x <= y + 1e-12 for x, y in zip(curve, curve[1:]))
    # the simulated GPU is neither sweep's: both warm-start rl+warm
    assert len(doc["warm_from"]) == 2 and doc["warm_left_out"] == []
    low, high = doc["bootstrap"]["g1000"]["band"]["random"]
    assert all(lo <= c <= hi for lo, c, hi in zip(low, doc["curves"]["g1000"]["random"][0], high))
    page = (tmp_path / "stores.md").read_text()
    assert "within a third" in page and (tmp_path / "stores.png").exists()


def test_each_complete_seed_gets_its_own_bootstrap(tmp_path):
    budget_hardware.main(study_args(tmp_path, 5) + ["--seeds", "2", "--proposers", "random,rl"])
    doc = json.loads((tmp_path / "stores.json").read_text())
    by_seed = doc["bootstrap_by_seed"]["g1000"]
    assert doc["seeds"]["g1000"] == [0, 1] and set(by_seed) == {"0", "1"}
    assert doc["bootstrap"]["g1000"] == by_seed["0"] and by_seed["0"] != by_seed["1"]   # other problems, other runs
    page = (tmp_path / "stores.md").read_text()
    assert all(f"| g1000 | {seed} | rl | " in page for seed in (0, 1))   # the policy against random, seed by seed
    # a whole table's search by the policy, seed by seed: the evaluations its own curve needs
    lines = page.split("A whole table's search by the policy")[1].splitlines()
    for seed in (0, 1):
        cells = next(line for line in lines if line.startswith(f"| g1000 | rl | {seed} | ")).split(" | ")
        curve = doc["curves"]["g1000"]["rl"][seed]
        reach = budget_hardware.evals_to_reach(0.99 * curve[-1], curve, budget_hardware.START)
        assert cells[5] == str(reach)


class KilledAfter:
    """The simulated judge, whose process is killed (an exception) after `count` verdicts."""

    def __init__(self, count: int):
        from search.simulate import SimulatedBackend
        self.inner, self.left = SimulatedBackend(seed=0), count

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def evaluate_iter(self, requests):
        for item in self.inner.evaluate_iter(requests):
            if self.left == 0:
                raise KeyboardInterrupt("killed by the call's time limit")
            self.left -= 1
            yield item


def test_a_study_killed_mid_run_goes_on_where_it_stopped(tmp_path):
    problems = budget_hardware.problem_sets(6, 0, 64, ["g1000"])["g1000"]
    path = budget_hardware.store_path(tmp_path / "cut", "g1000", "rl", 0)
    path.parent.mkdir()
    with pytest.raises(KeyboardInterrupt):
        budget_hardware.run_one(MemoBackend(KilledAfter(9)), path, problems, "rl", 0, 5, [], 5, 90, "sim")
    store = Store(path, readonly=True)
    before = [(r["candidate_id"], r["us"]) for r in store.evaluations()]
    store.close()
    assert 0 < len(before) < 30
    budget_hardware.main(study_args(tmp_path, 5, "cut"))
    budget_hardware.main(study_args(tmp_path, 5, "whole"))
    cut, whole = (json.loads((tmp_path / f"{n}.json").read_text()) for n in ("cut", "whole"))
    assert cut["runs"]["g1000/rl/0"]["complete"] and cut["runs"]["g1000/rl/0"]["evaluations"] == 30
    store = Store(path, readonly=True)
    assert [(r["candidate_id"], r["us"]) for r in store.evaluations()][:len(before)] == before   # kept, not re-run
    store.close()
    # the other runs, served the killed run's verdicts by the memo, count them in proposal order: unchanged
    # (the resumed run itself proposes anew after the kill: the loop's resume restarts its policy's sampler)
    for proposer in ("random", "rl+warm (other GPU)", "sweep"):
        assert cut["curves"]["g1000"][proposer] == whole["curves"]["g1000"][proposer]


def test_a_studys_curves_are_measured_again_from_its_gzipped_stores(tmp_path):
    budget_hardware.main(study_args(tmp_path, 5))
    doc = json.loads((tmp_path / "stores.json").read_text())
    zipped = tmp_path / "zipped"
    zipped.mkdir()
    for path in (tmp_path / "stores").glob("*.sqlite"):
        (zipped / (path.name + ".gz")).write_bytes(gzip.compress(path.read_bytes()))
    budget_hardware.main(["--render", "--out", str(tmp_path / "stores.json"), "--store-dir", str(zipped)])
    again = json.loads((tmp_path / "stores.json").read_text())
    assert again["curves"] == doc["curves"] and again["bootstrap"] == doc["bootstrap"]


def test_a_study_out_of_time_starts_no_run_and_reports_none(tmp_path):
    budget_hardware.main(study_args(tmp_path, 0, "none"))
    doc = json.loads((tmp_path / "none.json").read_text())
    assert doc["runs"] == {} and doc["curves"] == {}
    assert "No set has all its runs complete yet." in (tmp_path / "none.md").read_text()


def test_warm_start_leaves_out_the_measured_gpus_own_sweeps():
    used, left = budget_hardware.other_gpu_sweeps([H100_SWEEP, H200_SWEEP], "NVIDIA H200")
    assert used == [H100_SWEEP] and left == [H200_SWEEP]


def test_bootstrap_of_a_policy_equal_to_random_gives_ratio_one():
    by_problem = {f"p{i}": [0.5 + 0.1 * i, 0.6 + 0.1 * i, 0.9 + 0.05 * i] for i in range(5)}
    boot = budget_hardware.bootstrap({"random": by_problem, "rl": by_problem}, reps=200)
    assert boot["vs_random"]["rl"]["ratio"] == [1.0, 1.0]
    assert boot["vs_random"]["rl"]["reach"] == [3, 3] and boot["vs_random"]["rl"]["within_third"] == 0.0


def test_unknown_proposers_and_missing_warm_start_files_are_refused(capsys):
    with pytest.raises(SystemExit):
        budget_hardware.parse(["--out", "x.json", "--store-dir", "d", "--proposers", "genetic"])
    with pytest.raises(SystemExit):
        budget_hardware.parse(["--out", "x.json", "--store-dir", "d", "--warm-from", "/nonexistent/sweep.json"])
    assert "no such file: /nonexistent/sweep.json" in capsys.readouterr().err


def test_the_decode_set_can_keep_some_m_values_only():
    every = budget_hardware.problem_sets(6, 0, 64, ["llm_decode"])["llm_decode"]
    some = budget_hardware.problem_sets(6, 0, 64, ["llm_decode"], [1, 64])["llm_decode"]
    assert {p.m for p in every} == {1, 2, 4, 8, 16, 32, 64}
    assert {p.m for p in some} == {1, 64} and len(some) == len([p for p in every if p.m in (1, 64)])


def test_the_rate_counts_each_run_on_the_cards_that_judged_it():
    runs = {"a": {"judged": 600, "evaluations": 600, "elapsed_s": 60.0, "gpus": 4},
            "b": {"judged": 300, "evaluations": 400, "elapsed_s": 60.0, "gpus": 2},
            "c": {"judged": 100, "evaluations": 100, "elapsed_s": 60.0}}   # no card named: the last call's count
    rate, verdict_rate, judged, verdicts, gpu_minutes = budget_hardware.throughput({"runs": runs, "gpus": 3})
    assert (judged, verdicts, gpu_minutes) == (1000, 1100, 9.0)
    assert rate == pytest.approx(1000 / 9) and verdict_rate == pytest.approx(1100 / 9)


def test_the_curves_count_only_seeds_whose_runs_are_all_complete():
    """random complete for seeds 0 and 1, rl for seed 0 only: the mean over seeds must not average random over two
    seeds against rl over one, so seed 1 is left out of both."""
    best = {f"p{i}": [0.5, 0.8, 0.9 + 0.01 * i] for i in range(4)}
    better = {p: [x * 1.1 for x in v] for p, v in best.items()}
    doc = budget_hardware.analyse({"by_problem": {"g1000": {"random": {0: best, 1: better}, "rl": {0: best}}}},
                                  ["random", "rl"])
    assert doc["seeds"] == {"g1000": [0]}
    assert doc["curves"]["g1000"]["random"] == doc["curves"]["g1000"]["rl"] and len(doc["curves"]["g1000"]["rl"]) == 1
    none = budget_hardware.analyse({"by_problem": {"g1000": {"random": {1: best}, "rl": {0: best}}}}, ["random", "rl"])
    assert none["seeds"] == {} and none["curves"] == {}


def test_a_whole_tables_regeneration_is_projected_from_the_rate_by_size():
    by_bucket = {"<24": [10, 2.0], "24-28": [4, 4.0]}   # 0.2 s and 1 s per judged evaluation
    problems = [(64, 64, 64)] * 3 + [(256, 256, 256)]    # 2^18 three times, 2^24 once
    hours = budget_hardware.regeneration_hours(by_bucket, problems, per_problem=16)
    assert hours == pytest.approx(budget_hardware.VARIANTS * 16 * (3 * 0.2 + 1 * 1.0) / 3600)
    assert budget_hardware.regeneration_hours({"<24": [10, 2.0]}, problems, 16) is None   # no rate for 2^24
