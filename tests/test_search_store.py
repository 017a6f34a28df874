"""The SQLite store: one row per verdict and build, and a run SIGKILLed at random moments resumes losing nothing
that was completed."""
import random
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from search.backend import CompileOutcome
from search.candidate import OK, Candidate, EvalResult, Problem, Proposal
from search.store import Store

REPO = Path(__file__).resolve().parent.parent
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


def _rows(db: Path) -> set[tuple]:
    """The store's evaluations (none while the run is starting and has not created its tables)."""
    try:
        with sqlite3.connect(db) as con:
            return set(con.execute("SELECT id, run_id, candidate_id, problem_key, status, us FROM evaluations"))
    except sqlite3.OperationalError:
        return set()


def _wait_for_evaluations(db: Path, at_least: int, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    end = time.monotonic() + timeout
    while time.monotonic() < end and proc.poll() is None:
        if len(_rows(db)) >= at_least:
            return
        time.sleep(0.05)


def test_sigkill_at_random_moments_then_resume_loses_no_completed_evaluation(tmp_path):
    db = tmp_path / "killed.db"
    budget = 160
    run = [sys.executable, "-m", "search", "run", "--shapes", "sample10", "--budget-evals", str(budget), "--store",
           str(db), "--sim-delay-ms", "15", "--quiet"]
    resume = [sys.executable, "-m", "search", "resume", "--store", str(db), "--quiet"]
    rng = random.Random(7)
    completed: set[tuple] = set()
    proc = subprocess.Popen(run, cwd=REPO, stdout=subprocess.DEVNULL)
    for kill in range(3):
        _wait_for_evaluations(db, len(completed) + 5, proc)
        time.sleep(rng.uniform(0.0, 0.4))
        proc.kill()
        proc.wait()
        now = _rows(db)
        assert completed <= now, "a completed evaluation was lost"
        completed = now
        proc = subprocess.Popen(resume, cwd=REPO, stdout=subprocess.DEVNULL)
    assert proc.wait(timeout=120) == 0
    store = Store(db)
    assert len(store.runs()) == 1 and store.runs()[0]["finished"] is not None
    final = _rows(db)
    assert completed <= final and 0 < len(completed) < budget
    assert store.evaluation_count(store.runs()[0]["id"]) == budget
    keys = store.query("SELECT candidate_id, problem_key, COUNT(*) AS n FROM evaluations GROUP BY 1, 2 HAVING n > 1")
    assert keys == []
    built = {r[0] for r in store.query("SELECT build_key FROM compiles")}
    assert {r["candidate_id"].split("@")[0] for r in store.evaluations()} <= built
