"""The SQLite store: one row per verdict and build, a problem's proposals of a round recorded together, one writer at
a time, read-only opens that create and write nothing, and clear errors for files that are not stores (the CLI's
view of them: tests/test_search_cli_errors.py; kills and resumes: tests/test_search_resume_kill.py)."""
import hashlib
import os
import sqlite3

import pytest

from search.backend import REFUSED, CompileOutcome
from search.candidate import COMPILE_ERROR, OK, SCAN_REJECTED, Candidate, EvalResult, Problem, Proposal
from search.source_build import MAX_SOURCE_CHARS
from search.store import APPLICATION_ID, SCHEMA, TEXT_CAP, Store, StoreError, clip
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


def test_a_failed_build_keeps_its_status_and_an_older_store_gets_the_column(tmp_path):
    store = Store(":memory:")
    run = store.create_run("rl", {}, {}, [PROBLEM])
    store.add_compile("refused", CompileOutcome(False, log=f"{REFUSED}: dlsym", status=SCAN_REJECTED), run)
    store.add_compile("broken", CompileOutcome(False, log="nvcc: error"), run)
    assert store.compile_outcome("refused").status == SCAN_REJECTED
    assert store.compile_outcome("broken").status == COMPILE_ERROR
    db = tmp_path / "old.db"   # a store written before compiles had a status: its failures get one from their log
    con = sqlite3.connect(db)
    con.executescript(SCHEMA.replace(",\n    status TEXT NOT NULL DEFAULT ''", ""))
    rows = [("refused", 0, f"{REFUSED} (banned constructs): dlsym"), ("broken", 0, "error: no such config"),
            ("built", 1, "built")]
    con.executemany("INSERT INTO compiles VALUES (?, ?, '', ?, 1.0, 0, 'r', 0)", rows)
    con.commit()
    con.close()
    old = Store(db)
    assert [old.compile_outcome(key).status for key, _, _ in rows] == [SCAN_REJECTED, COMPILE_ERROR, ""]
    old.close()


def test_sources_and_completions_are_stored_cut_with_a_marker():
    assert TEXT_CAP >= MAX_SOURCE_CHARS   # a source the search may compile is stored whole
    assert clip("short") == "short" and clip("x" * TEXT_CAP) == "x" * TEXT_CAP
    store = Store(":memory:")
    run = store.create_run("rl", {}, {}, [PROBLEM])
    huge = "// " + "y" * (3 * TEXT_CAP)
    cand = Candidate(source=huge, source_name="huge", provenance="llm:x")
    store.add_proposals(run, 0, PROBLEM, [(Proposal(cand, "scan_rejected", "too long", "the prompt", "z" * 10 ** 6),
                                           "llm:x")])
    (row,) = store.query("SELECT source, source_hash FROM candidates")
    assert row["source"].startswith(huge[:TEXT_CAP]) and len(row["source"]) < TEXT_CAP + 100
    assert f"{len(huge) - TEXT_CAP} more characters cut" in row["source"]
    assert row["source_hash"] == hashlib.sha256(huge.encode()).hexdigest()   # the identity of the whole source
    (proposal,) = store.proposals(run)
    assert proposal["completion"].startswith("z" * TEXT_CAP) and len(proposal["completion"]) < TEXT_CAP + 100
    assert f"{10 ** 6 - TEXT_CAP} more characters cut" in proposal["completion"]
    assert proposal["prompt"] == "the prompt" and proposal["candidate_id"] == cand.id
