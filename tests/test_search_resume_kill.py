"""SIGKILLed `python -m search` processes (sim backend) resume to what an uninterrupted run gives.

Kills land at exact points through the test-only hook CUDAL2_SEARCH_KILL_AT (search/fault_injection.py): during a
round's proposals, with a verdict in flight, before the run is recorded, and during emit; one more kill lands at a
random moment. After each kill the store passes `PRAGMA integrity_check` and keeps every verdict it had committed;
after the last resume every problem has its share of evaluations (the same count per problem as an uninterrupted run)
and no (candidate, problem) is evaluated twice. Two writers on one store: the second gets a one-line error.
"""
from __future__ import annotations

import hashlib
import json
import os
import random
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest

from search.candidate import Problem
from search.fault_injection import ENV, checkpoint
from search.loop import RunArgs, Search
from search.simulate import SimulatedBackend
from search.store import Store

REPO = Path(__file__).resolve().parent.parent
SHAPES = [(64, 4096, 4096), (128, 1024, 512), (256, 256, 256), (1024, 1024, 1024), (32, 8192, 2048), (512, 128, 64)]
PER_ROUND, ROUNDS = 2, 3
BUDGET = len(SHAPES) * PER_ROUND * ROUNDS   # every problem's share: PER_ROUND * ROUNDS evaluations


def search_cmd(*args: str, kill_at: str | None = None) -> subprocess.Popen:
    """`python -m search ARGS` in a subprocess (killed at `kill_at` when given)."""
    env = {k: v for k, v in os.environ.items() if k != ENV}
    if kill_at:
        env[ENV] = kill_at
    return subprocess.Popen([sys.executable, "-m", "search", *args], cwd=REPO, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def finish(proc: subprocess.Popen, timeout: float = 120.0) -> tuple[int, str]:
    """The exit status and stderr of a finished process."""
    _, err = proc.communicate(timeout=timeout)
    return proc.returncode, err


def run_args(db: Path, shapes: Path, delay_ms: int = 0) -> list[str]:
    return ["run", "--shapes", str(shapes), "--per-round", str(PER_ROUND), "--budget-evals", str(BUDGET),
            "--store", str(db), "--sim-delay-ms", str(delay_ms), "--quiet"]


def shapes_file(tmp_path: Path) -> Path:
    path = tmp_path / "shapes.txt"
    path.write_text("".join(f"{m} {n} {k}\n" for m, n, k in SHAPES))
    return path


def rows(db: Path, sql: str) -> list[tuple]:
    """Rows of a query on the store file (a plain read-only connection)."""
    con = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        return con.execute(sql).fetchall()
    finally:
        con.close()


def verdicts(db: Path) -> set[tuple]:
    return set(rows(db, "SELECT id, run_id, round, candidate_id, problem_key, status, us, reward FROM evaluations"))


def delivered(db: Path) -> int:
    """Verdicts the backend delivered (failed builds are recorded without it)."""
    return rows(db, "SELECT COUNT(*) FROM evaluations WHERE status != 'compile_error'")[0][0]


def wait_for_verdicts(db: Path, count: int, proc: subprocess.Popen, timeout: float = 60.0) -> None:
    """Waits until the store holds `count` verdicts (or the process ends, or `timeout` passes)."""
    end = time.monotonic() + timeout
    while proc.poll() is None and time.monotonic() < end:
        try:
            if db.exists() and len(verdicts(db)) >= count:
                return
        except sqlite3.OperationalError:
            pass  # the run has not created its tables yet
        time.sleep(0.02)


def assert_intact(db: Path) -> None:
    assert rows(db, "PRAGMA integrity_check") == [("ok",)]
    assert rows(db, "SELECT candidate_id, problem_key, COUNT(*) FROM evaluations GROUP BY 1, 2 HAVING COUNT(*) > 1") \
        == []


def per_problem(db: Path) -> dict[str, int]:
    return dict(rows(db, "SELECT problem_key, COUNT(*) FROM evaluations GROUP BY problem_key"))


def uninterrupted_counts() -> dict[str, int]:
    """Evaluations per problem of the same run, uninterrupted (in this process)."""
    store = Store(":memory:")
    problems = [Problem("nt", "fp16", *s) for s in SHAPES]
    Search.start(store, SimulatedBackend(), RunArgs(per_round=PER_ROUND, budget_evals=BUDGET), problems).run()
    return dict(store.query("SELECT problem_key, COUNT(*) FROM evaluations GROUP BY problem_key"))


def test_checkpoints_do_nothing_unless_named(monkeypatch):
    monkeypatch.delenv(ENV, raising=False)
    checkpoint("verdict")
    monkeypatch.setenv(ENV, "proposed:3")
    checkpoint("verdict")   # another point: nothing
    monkeypatch.setenv(ENV, "nowhere:1")
    with pytest.raises(ValueError, match="nowhere"):
        checkpoint("verdict")


def test_kills_during_proposal_and_evaluation_then_resume_give_every_problem_its_share(tmp_path):
    db, shapes = tmp_path / "s.db", shapes_file(tmp_path)
    resume = ["resume", "--store", str(db), "--quiet"]
    share = PER_ROUND * ROUNDS
    assert set(uninterrupted_counts().values()) == {share}

    # Killed in round 1's proposal phase, after its third problem's proposals were committed.
    proposed_at = len(SHAPES) + 3
    assert finish(search_cmd(*run_args(db, shapes), kill_at=f"proposed:{proposed_at}"))[0] == -9
    assert_intact(db)
    assert len(rows(db, "SELECT DISTINCT problem_key FROM proposals WHERE round = 1")) == 3
    assert len(verdicts(db)) == len(SHAPES) * PER_ROUND
    committed = verdicts(db)

    # Resumed, then killed with its fifth verdict in flight: the four before it are stored, that one is not. The
    # proposals the round has are evaluated first; its other problems are proposed after them (what those verdicts
    # taught the policy shapes their proposals), so they are not proposed yet.
    before = delivered(db)
    assert finish(search_cmd(*resume, kill_at="verdict:5"))[0] == -9
    assert_intact(db)
    assert committed <= verdicts(db) and delivered(db) == before + 4
    assert len(rows(db, "SELECT DISTINCT problem_key FROM proposals WHERE round = 1")) == 3
    committed = verdicts(db)

    # Resumed, then killed in round 2's proposals (after its second problem; round 1's last three came first).
    assert finish(search_cmd(*resume, kill_at="proposed:5"))[0] == -9
    assert_intact(db)
    assert committed <= verdicts(db)
    assert len(rows(db, "SELECT DISTINCT problem_key FROM proposals WHERE round = 2")) == 2
    committed = verdicts(db)

    status, err = finish(search_cmd(*resume))
    assert status == 0, err
    assert_intact(db)
    assert committed <= verdicts(db)
    assert per_problem(db) == {Problem("nt", "fp16", *s).key: share for s in SHAPES}
    assert rows(db, "SELECT COUNT(*), COUNT(finished) FROM runs") == [(1, 1)]
    assert {r[0] for r in rows(db, "SELECT round FROM policy_snapshots")} == set(range(ROUNDS))


def test_kill_before_the_run_is_recorded_then_resume_says_so(tmp_path):
    db, shapes = tmp_path / "s.db", shapes_file(tmp_path)
    assert finish(search_cmd(*run_args(db, shapes), kill_at="started"))[0] == -9
    assert_intact(db)
    assert rows(db, "SELECT COUNT(*) FROM runs") == [(0,)]
    status, err = finish(search_cmd("resume", "--store", str(db)))
    assert status == 2 and err.count("\n") == 1 and "holds no run" in err and "Traceback" not in err
    status, err = finish(search_cmd(*run_args(db, shapes)))   # the same store takes a new run
    assert status == 0, err
    assert per_problem(db) == uninterrupted_counts()


def test_kill_during_emit_leaves_the_store_and_the_table_whole(tmp_path):
    db, shapes = tmp_path / "s.db", shapes_file(tmp_path)
    assert finish(search_cmd(*run_args(db, shapes)))[0] == 0
    digest = hashlib.sha256(db.read_bytes()).hexdigest()
    root = tmp_path / "kernels"
    emit = ["emit", "--store", str(db), "--root", str(root)]

    assert finish(search_cmd(*emit, kill_at="emit"))[0] == -9   # store open, nothing written yet
    assert not root.exists()
    proc = search_cmd(*emit)                                     # killed as soon as its first file appears
    while proc.poll() is None and not any(root.rglob("*.json")):
        time.sleep(0.001)
    proc.kill()
    proc.communicate()
    for table in root.rglob("*.json"):
        json.loads(table.read_text())                             # complete: tables are replaced atomically
    assert hashlib.sha256(db.read_bytes()).hexdigest() == digest  # emit opens the store read-only
    assert_intact(db)

    status, err = finish(search_cmd(*emit))
    assert status == 0, err
    fresh = tmp_path / "fresh"
    assert finish(search_cmd("emit", "--store", str(db), "--root", str(fresh)))[0] == 0
    (table,) = root.rglob("*.json")
    (expected,) = fresh.rglob("*.json")
    assert json.loads(table.read_text())["entries"] == json.loads(expected.read_text())["entries"]


def test_kill_at_a_random_moment_loses_no_committed_verdict(tmp_path):
    db, shapes = tmp_path / "s.db", shapes_file(tmp_path)
    proc = search_cmd(*run_args(db, shapes, delay_ms=20))
    wait_for_verdicts(db, 8, proc)
    time.sleep(random.Random(3).uniform(0.0, 0.2))
    proc.kill()
    proc.communicate()
    committed = verdicts(db)
    assert_intact(db)
    status, err = finish(search_cmd("resume", "--store", str(db), "--quiet"))
    assert status == 0, err
    assert committed <= verdicts(db) and per_problem(db) == uninterrupted_counts()


def test_a_second_writer_gets_a_one_line_error(tmp_path):
    db, shapes = tmp_path / "s.db", shapes_file(tmp_path)
    first = search_cmd(*run_args(db, shapes, delay_ms=250))   # 36 verdicts: 9 s, while the second one starts
    wait_for_verdicts(db, 1, first)
    assert first.poll() is None, "the first run ended before the second writer could meet it"
    status, err = finish(search_cmd("resume", "--store", str(db)))
    assert status == 2 and err.count("\n") == 1 and "in use by another search run" in err and "Traceback" not in err
    status, err = finish(first)
    assert status == 0, err
    assert_intact(db)
    assert sum(per_problem(db).values()) == BUDGET
    assert rows(db, "SELECT COUNT(*) FROM proposals") == rows(db, "SELECT COUNT(*) FROM (SELECT DISTINCT run_id, "
                                                                   "round, problem_key, candidate_id FROM proposals)")
