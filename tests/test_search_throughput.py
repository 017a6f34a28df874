"""Throughput without weakening the judge, on CPU: batches of one problem's candidates per judge request (a crash
re-queues the rest of its batch), the baseline timed once per problem and reused across restarts and resumed runs
(by fingerprint), and compiles streamed and overlapped with evaluation without changing what the run records."""
from __future__ import annotations

import dataclasses
import time

from search import baseline_cache
from search.candidate import CRASH, OK, Candidate, Problem
from search.eval_worker import SELFTEST_ENV
from search.evaluator import EvaluatorPool, batches
from search.loop import RunArgs, Search
from search.simulate import SimulatedBackend
from search.store import Store

SELFTEST = {SELFTEST_ENV: "1"}
P0, P1 = Problem("nt", "fp16", 64, 4096, 4096), Problem("nt", "fp16", 128, 4096, 4096)


def test_batches_are_runs_of_one_problem_within_the_size():
    requests = [(Candidate(config=f"k{i}"), p, "x.so") for i, p in enumerate([P0, P0, P0, P1, P0, P0])]
    assert batches(requests, 2) == [[0, 1], [2], [3], [4, 5]]
    assert batches(requests, 8) == [[0, 1, 2], [3], [4, 5]]


def test_a_crash_mid_batch_sends_the_rest_again_and_the_baseline_outlives_the_worker():
    """One worker, one batch: the candidate after the crash is judged by a restarted worker, which is handed the
    problem's baseline instead of timing it again; the other problem gets its own."""
    pool = EvaluatorPool(["0"], timeout_s=10.0, extra_env=SELFTEST, batch=8)
    try:
        names = ["fine_a", "selftest_crash", "fine_b", "fine_c"]
        results = pool.evaluate([(Candidate(config=n), P0, "/x.so") for n in names] +
                                [(Candidate(config="fine_d"), P1, "/x.so")])
    finally:
        pool.close()
    assert [r.status for r in results] == [OK, CRASH, OK, OK, OK]
    docs = [r.baseline_cases for r in results if r.status == OK]
    assert docs[0] == docs[1] == docs[2] and docs[0]["problem"] == P0.key
    assert docs[3]["problem"] == P1.key and docs[3]["seeds"] != docs[0]["seeds"]
    assert docs[0]["seeds"] == baseline_cache.case_seeds(P0.key, 3)


def test_a_baseline_of_another_fingerprint_is_timed_again():
    foreign = {"fingerprint": "another-gpu", "problem": P0.key, "calls": 2, "seeds": baseline_cache.case_seeds(
        P0.key, 3), "us": [1.0] * 3, "wall_us": [1.0] * 3, "timed_by": -1}
    mine = {**foreign, "fingerprint": "selftest", "timed_by": -2}
    for given, expected in (([foreign], None), ([foreign, mine], -2)):
        pool = EvaluatorPool(["0"], timeout_s=10.0, extra_env=SELFTEST)
        pool.use_baselines(given)
        try:
            doc = pool.evaluate([(Candidate(config="fine"), P0, "/x.so")])[0].baseline_cases
        finally:
            pool.close()
        assert doc["fingerprint"] == "selftest" and (doc["timed_by"] == expected if expected else doc["timed_by"] > 0)


def test_valid_refuses_a_document_for_other_cases_or_with_bad_times():
    doc = {"fingerprint": "f", "problem": P0.key, "calls": 4, "seeds": baseline_cache.case_seeds(P0.key, 3),
           "us": [2.0] * 3, "wall_us": [3.0] * 3}
    assert baseline_cache.valid(doc, "f", P0.key, 3)
    assert not baseline_cache.valid(doc, "f", P0.key, 2)
    assert not baseline_cache.valid(doc, "g", P0.key, 3)
    assert not baseline_cache.valid({**doc, "us": [2.0, 0.0, 2.0]}, "f", P0.key, 3)
    assert not baseline_cache.valid({**doc, "problem": P1.key}, "f", P1.key, 3)


def test_the_store_keeps_baselines_and_a_run_hands_them_to_its_backend(tmp_path):
    doc = {"fingerprint": "f", "problem": P0.key, "calls": 4, "seeds": [1], "us": [2.0], "wall_us": [3.0]}
    store = Store(tmp_path / "s.db")
    store.add_baseline(doc)
    store.add_baseline({**doc, "us": [9.0]})   # the first of a fingerprint and problem is kept
    assert store.baselines() == [doc]

    class Recording(SimulatedBackend):
        """Records the documents it is handed; its verdicts carry a baseline document of fingerprint "g"."""

        def use_baselines(self, docs):
            self.handed = docs

        def evaluate_iter(self, requests):
            for index, result in super().evaluate_iter(requests):
                yield index, dataclasses.replace(result, baseline_cases={**doc, "fingerprint": "g",
                                                                         "problem": requests[index][1].key})

    backend = Recording(seed=0)
    Search.start(store, backend, RunArgs(policy="random", budget_evals=4), [P0]).run()
    assert backend.handed == [doc]
    assert [(d["fingerprint"], d["problem"]) for d in store.baselines()] == [("f", P0.key), ("g", P0.key)]
    store.close()


@dataclasses.dataclass
class StreamedBuilds(SimulatedBackend):
    """The simulator with builds streamed one by one, each taking `build_s`; logs builds and evaluations."""

    build_s: float = 0.02

    def __post_init__(self) -> None:
        super().__post_init__()
        self.log: list[tuple[str, float]] = []

    def compile_iter(self, candidates):
        for cand in {c.build_key: c for c in candidates}.values():
            time.sleep(self.build_s)
            self.log.append(("built", time.monotonic()))
            yield cand.build_key, self.compile([cand])[cand.build_key]

    def evaluate_iter(self, requests):
        for index, result in super().evaluate_iter(requests):
            self.log.append(("evaluated", time.monotonic()))
            yield index, result


def run_records(backend, budget: int) -> list[tuple]:
    store = Store(":memory:")
    search = Search.start(store, backend, RunArgs(policy="random", budget_evals=budget, seed=2, chunk=8),
                          [P0, P1, Problem("nt", "fp16", 4096, 4096, 4096)])
    search.run()
    rows = [(r["round"], r["candidate_id"], r["problem_key"], r["status"], r["reward"])
            for r in store.evaluations(search.run_id)]
    builds = {r["build_key"]: (r["ok"], r["status"]) for r in store.query("SELECT * FROM compiles")}
    return [rows, builds]


def test_streamed_builds_overlap_evaluation_and_change_nothing_recorded():
    streamed = StreamedBuilds(seed=2)
    assert run_records(streamed, 24) == run_records(SimulatedBackend(seed=2), 24)
    kinds = [kind for kind, _ in streamed.log]
    assert kinds.count("built") > 1 and kinds.index("evaluated") < len(kinds) - 1 - kinds[::-1].index("built"), (
        "an evaluation ran before the round's last build finished")


def test_the_report_states_the_rate_with_and_without_compiles():
    from search import run_report
    store = Store(":memory:")
    search = Search.start(store, SimulatedBackend(seed=0), RunArgs(policy="random", budget_evals=8), [P0])
    search.run()
    store.add_elapsed(search.run_id, 30.0)
    run = store.run(search.run_id)
    row = next(line for line in run_report.throughput(store) if line.startswith(f"| {search.run_id}"))
    judged = store.query("SELECT COUNT(*), SUM(eval_s) FROM evaluations WHERE eval_s > 0")[0]
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[1] == "8" and float(cells[3]) == round(60 * 8 / run["elapsed_s"], 1)
    assert int(cells[4]) == judged[0] and float(cells[6]) == round(60 * judged[0] / judged[1], 1)


def test_the_report_gives_a_resumed_runs_rate_by_session():
    from search import run_report
    store = Store(":memory:")
    search = Search.start(store, SimulatedBackend(seed=0), RunArgs(policy="random", budget_evals=8), [P0, P1])
    search.run()
    assert run_report.by_session(store) == []   # one session: nothing more to say
    ids = [r[0] for r in store.query("SELECT id FROM evaluations ORDER BY created, id")]
    later = ids[len(ids) // 2:]   # a second GPU call an hour later
    store.db.execute(f"UPDATE evaluations SET created = created + 3600 WHERE id IN ({','.join('?' * len(later))})",
                     later)
    rows = run_report.session_rows(store)
    assert [row[2] for row in rows] == [len(ids) - len(later), len(later)] and all(row[0] == search.run_id
                                                                                   for row in rows)
    assert any(line.startswith("| run | session (UTC)") for line in run_report.by_session(store))


def test_a_rounds_built_kernels_are_evaluated_while_its_new_builds_compile():
    """Within one evaluation pass the requests whose builds are in go first, those whose builds were still compiling
    after (so the backend's nvcc runs while the GPU evaluates, instead of the GPU waiting at the first new build)."""
    backend = StreamedBuilds(seed=3, build_s=0.01)
    store = Store(":memory:")
    search = Search.start(store, backend, RunArgs(policy="rl", budget_evals=30, per_round=6, seed=3),
                          [P0, P1, Problem("nt", "fp16", 4096, 4096, 4096), Problem("nt", "fp16", 64, 512, 4096),
                           Problem("nt", "fp16", 128, 128, 1024)])
    search.run()
    ready = backend.prebuilt()
    order = [store.candidate(r["candidate_id"]).build_key in ready
             for r in store.evaluations(search.run_id) if r["round"] == 0]
    assert True in order and False in order
    assert order == sorted(order, reverse=True)  # every built one before the first new build


def test_the_report_says_where_each_runs_evaluations_went_by_family():
    """`spending`: per run and family, its evaluations (the shares add up to the run's), the judged ones under the
    veto's share of the bar and those over the bar, as the stored verdicts say."""
    from search import run_report
    from search.proposers import VETO_BELOW
    store = Store(":memory:")
    search = Search.start(store, SimulatedBackend(seed=0), RunArgs(policy="random", budget_evals=24), [P0, P1])
    search.run()
    rows = [[c.strip() for c in line.strip("|").split("|")] for line in run_report.spending(store)
            if line.startswith(f"| {search.run_id}")]
    evaluations = store.evaluations(search.run_id)
    assert sum(int(r[2]) for r in rows) == len(evaluations) == 24
    speedups = [e["baseline_us"] / e["us"] for e in evaluations if e["status"] == OK and e["us"]]
    assert sum(int(r[4]) for r in rows) == sum(s < VETO_BELOW for s in speedups)
    assert sum(int(r[5]) for r in rows) == sum(s > 1.0 for s in speedups)


def test_the_report_says_where_each_runs_evaluations_went_by_round():
    """`spending_by_round`: per run and round, the problems it visited, its evaluations (adding up to the run's), the
    share of them under the veto's share of the bar and the verdicts over the bar, as the stored verdicts say."""
    from search import run_report
    from search.proposers import VETO_BELOW
    store = Store(":memory:")
    search = Search.start(store, SimulatedBackend(seed=1), RunArgs(policy="random", budget_evals=24, per_round=4),
                          [P0, P1])
    search.run()
    rows = {int(r[1]): r for r in ([c.strip() for c in line.strip("|").split("|")]
                                   for line in run_report.spending_by_round(store)
                                   if line.startswith(f"| {search.run_id}"))}
    evaluations = store.evaluations(search.run_id)
    assert sorted(rows) == sorted({e["round"] for e in evaluations}) and len(rows) > 1
    for number, row in rows.items():
        those = [e for e in evaluations if e["round"] == number]
        speedups = [e["baseline_us"] / e["us"] for e in those if e["status"] == OK and e["us"]]
        assert int(row[2]) == len({e["problem_key"] for e in those}) and int(row[3]) == len(those)
        assert row[4] == f"{sum(s < VETO_BELOW for s in speedups) / len(those):.0%}"
        assert int(row[5]) == sum(s > 1.0 for s in speedups)
