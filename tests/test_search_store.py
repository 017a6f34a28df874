"""The SQLite store: one row per verdict and build, a problem's proposals of a round recorded together, one writer at
a time, read-only opens that create and write nothing, and clear errors for files that are not stores (the CLI's
view of them: tests/test_search_cli_errors.py; kills and resumes: tests/test_search_resume_kill.py)."""
import os
import sqlite3

import pytest

from search.backend import CompileOutcome
from search.candidate import OK, Candidate, EvalResult, Problem, Proposal
from search.store import APPLICATION_ID, SCHEMA, Store, StoreError
PROBLEM = Problem("nt", "fp16", 64, 128, 256)
CAND = Candidate(config="decode_fp16_nt_16x64x64_s4_w4", knobs=(2, 0, 0), provenance="policy")


def test_records_round_trip_and_duplicates_are_refused(tmp_path):
    store = Store(tmp_path / "s.db")
    assert store.query("PRAGMA journal_mode")[0][0] == "wal"
    run = store.create_run("rl", {"seed": 1}, {"gpu_name": "g", "arch": 90}, [PROBLEM])
    store.add_candidate(CAND)
    assert store.candidate(CAND.id) == CAND
    store.add_compile(CAND.build_key, CompileOutcome(True, "a.so", "log", 2.0), run)
    store.add_compile(CAND.build_key, CompileOutcome(False, "", "again", 9.0), run)  # ignored: compiled once
    assert store.compile_outcome(CAND.build_key) == CompileOutcome(True, "a.so", "log", 2.0)
    result = EvalResult(OK, us=1.0, baseline_us=1.5, case_speedups=[1.5], max_rel_err=1e-4, gpu={"gpu_name": "g"})
    store.add_evaluation(run, 0, CAND, PROBLEM, result, 1.4)
    with pytest.raises(sqlite3.IntegrityError):
        store.add_evaluation(run, 1, CAND, PROBLEM, result, 1.4)
    store.add_proposal(run, 0, PROBLEM, Proposal(None, "malformed", "not JSON", "prompt", "{"), "llm:x")
    assert store.evaluation_count(run) == 1 and store.tried(run) == {PROBLEM.key: {CAND.id}}
    assert [r["status"] for r in store.proposals(run)] == ["malformed"]
    store.save_policy(run, 0, {"w": [1]})
    assert store.latest_policy(run) == {"w": [1]}
    assert store.unfinished_run() == run
    store.finish_run(run)
    assert store.unfinished_run() is None


def test_read_only_opens_never_create_and_never_write(tmp_path):
    missing = tmp_path / "missing.db"
    with pytest.raises(StoreError, match="missing.db does not exist"):
        Store(missing, readonly=True)
    assert list(tmp_path.iterdir()) == []
    db = tmp_path / "s.db"
    writer = Store(db)
    run = writer.create_run("rl", {}, {}, [PROBLEM])
    writer.close()
    digest = db.read_bytes()
    reader = Store(db, readonly=True)
    assert [r["id"] for r in reader.runs()] == [run]
    with pytest.raises(sqlite3.OperationalError, match="readonly"):
        reader.finish_run(run)
    reader.close()
    assert db.read_bytes() == digest


def test_one_writer_at_a_time_and_readers_beside_it(tmp_path):
    db = tmp_path / "s.db"
    writer = Store(db)
    run = writer.create_run("rl", {}, {}, [PROBLEM])
    with pytest.raises(StoreError, match=rf"in use by another search run or resume \(pid {os.getpid()},"):
        Store(db)
    reader = Store(db, readonly=True)          # readers do not take the lock
    assert reader.run(run)["policy"] == "rl"
    writer.close()                             # closing releases the lock
    again = Store(db)
    again.close()
    reader.close()


def test_an_older_store_without_the_application_id_is_still_a_store(tmp_path):
    db = tmp_path / "old.db"
    con = sqlite3.connect(db)
    con.executescript(SCHEMA)
    con.close()
    reader = Store(db, readonly=True)
    assert reader.runs() == []
    reader.close()
    Store(db).close()
    assert sqlite3.connect(db).execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID


def test_unknown_runs_are_named_with_the_store_s_runs(tmp_path):
    store = Store(tmp_path / "s.db")
    with pytest.raises(StoreError, match="it holds no run"):
        store.run("bogus")
    run = store.create_run("rl", {}, {}, [PROBLEM])
    with pytest.raises(StoreError, match=f"no run 'bogus' in .*s.db \\(its runs: {run}\\)"):
        store.run("bogus")


def test_a_problem_s_proposals_are_recorded_together_and_unevaluated_ones_found(tmp_path):
    store = Store(":memory:")
    run = store.create_run("rl", {}, {}, [PROBLEM])
    other = Candidate(config="decode_fp16_nt_16x64x64_s4_w4", knobs=(0, 0, 0), provenance="random")
    store.add_proposals(run, 0, PROBLEM, [(Proposal(CAND), "policy"), (Proposal(other), "random"),
                                          (Proposal(None, "malformed", "no JSON"), "llm:x")], elapsed_s=2.5)
    with pytest.raises(sqlite3.IntegrityError):   # a bad row rolls back the whole problem
        store.add_proposals(run, 1, PROBLEM, [(Proposal(CAND), "policy"), (Proposal(other), None)])
    assert store.proposed_problems(run, 0) == {PROBLEM.key} and store.proposed_problems(run, 1) == set()
    assert store.run(run)["elapsed_s"] == 2.5
    result = EvalResult(OK, us=1.0, baseline_us=1.5, case_speedups=[1.5], max_rel_err=1e-4, gpu={"gpu_name": "g"})
    store.add_evaluation(run, 0, CAND, PROBLEM, result, 1.4, elapsed_s=1.0)
    assert [(r["round"], r["candidate_id"]) for r in store.unevaluated(run)] == [(0, other.id)]
    assert store.run(run)["elapsed_s"] == 3.5
    store.save_policy(run, 0, {})
    assert store.snapshot_rounds(run) == {0}
