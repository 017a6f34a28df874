"""The search's SQLite store (WAL): runs, problems, candidates, compiles, evaluations, proposals, policy snapshots.

Every write is its own short transaction, committed before the call returns, so a run killed at any moment (SIGKILL
included) loses at most the candidates in flight; `python -m search resume` continues from what is here. One
evaluation per (run, candidate, problem) and one compile per build key are enforced by the schema.
"""
from __future__ import annotations

import hashlib
import json
import sqlite3
import time
import uuid
from pathlib import Path
from typing import Any, Iterator

from search.backend import CompileOutcome
from search.candidate import Candidate, EvalResult, Problem, Proposal

SCHEMA = """
CREATE TABLE IF NOT EXISTS runs (
    id TEXT PRIMARY KEY, policy TEXT NOT NULL, args TEXT NOT NULL, environment TEXT NOT NULL,
    started REAL NOT NULL, elapsed_s REAL NOT NULL DEFAULT 0, finished REAL);
CREATE TABLE IF NOT EXISTS problems (
    key TEXT PRIMARY KEY, layout TEXT NOT NULL, dtype TEXT NOT NULL, m INTEGER NOT NULL, n INTEGER NOT NULL,
    k INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS run_problems (
    run_id TEXT NOT NULL REFERENCES runs(id), problem_key TEXT NOT NULL REFERENCES problems(key),
    PRIMARY KEY (run_id, problem_key));
CREATE TABLE IF NOT EXISTS candidates (
    id TEXT PRIMARY KEY, build_key TEXT NOT NULL, config TEXT NOT NULL, knobs TEXT NOT NULL,
    source_hash TEXT NOT NULL, source TEXT NOT NULL, source_name TEXT NOT NULL, provenance TEXT NOT NULL,
    created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS compiles (
    build_key TEXT PRIMARY KEY, ok INTEGER NOT NULL, artifact TEXT NOT NULL, log TEXT NOT NULL,
    seconds REAL NOT NULL, created REAL NOT NULL, run_id TEXT NOT NULL, prebuilt INTEGER NOT NULL);
CREATE TABLE IF NOT EXISTS evaluations (
    id INTEGER PRIMARY KEY, run_id TEXT NOT NULL REFERENCES runs(id), round INTEGER NOT NULL,
    candidate_id TEXT NOT NULL REFERENCES candidates(id), problem_key TEXT NOT NULL REFERENCES problems(key),
    provenance TEXT NOT NULL, status TEXT NOT NULL, reason TEXT NOT NULL, us REAL, baseline_us REAL,
    case_speedups TEXT NOT NULL, max_rel_err REAL, reward REAL NOT NULL, gpu TEXT NOT NULL, compile_s REAL NOT NULL,
    eval_s REAL NOT NULL, created REAL NOT NULL, UNIQUE (run_id, candidate_id, problem_key));
CREATE TABLE IF NOT EXISTS proposals (
    id INTEGER PRIMARY KEY, run_id TEXT NOT NULL REFERENCES runs(id), round INTEGER NOT NULL,
    problem_key TEXT NOT NULL, provenance TEXT NOT NULL, candidate_id TEXT, status TEXT NOT NULL,
    reason TEXT NOT NULL, prompt TEXT NOT NULL, completion TEXT NOT NULL, created REAL NOT NULL);
CREATE TABLE IF NOT EXISTS policy_snapshots (
    id INTEGER PRIMARY KEY, run_id TEXT NOT NULL REFERENCES runs(id), round INTEGER NOT NULL, state TEXT NOT NULL,
    created REAL NOT NULL);
CREATE INDEX IF NOT EXISTS evaluations_by_problem ON evaluations (problem_key, status);
"""


class Store:
    """A search store at `path` (":memory:" for a throwaway one)."""

    def __init__(self, path: str | Path):
        self.path = str(path)
        self.db = sqlite3.connect(self.path, isolation_level=None, timeout=30.0)
        self.db.row_factory = sqlite3.Row
        if self.path != ":memory:":
            self.db.execute("PRAGMA journal_mode=WAL")
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("PRAGMA foreign_keys=ON")
        self.db.executescript(SCHEMA)

    def close(self) -> None:
        self.db.close()

    def _write(self, sql: str, params: tuple = ()) -> sqlite3.Cursor:
        """One statement in its own committed transaction."""
        with self.db:
            return self.db.execute(sql, params)

    def query(self, sql: str, params: tuple = ()) -> list[sqlite3.Row]:
        """Rows of a read-only query."""
        return self.db.execute(sql, params).fetchall()

    # runs and problems
    def create_run(self, policy: str, args: dict[str, Any], environment: dict[str, Any],
                   problems: list[Problem]) -> str:
        """A new run over `problems` (args: the CLI's, enough to resume); returns its id."""
        run_id = time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
        with self.db:
            self.db.execute("INSERT INTO runs (id, policy, args, environment, started) VALUES (?, ?, ?, ?, ?)",
                            (run_id, policy, json.dumps(args, sort_keys=True), json.dumps(environment), time.time()))
            for p in problems:
                self.db.execute("INSERT OR IGNORE INTO problems VALUES (?, ?, ?, ?, ?, ?)",
                                (p.key, p.layout, p.dtype, p.m, p.n, p.k))
                self.db.execute("INSERT OR IGNORE INTO run_problems VALUES (?, ?)", (run_id, p.key))
        return run_id

    def run(self, run_id: str) -> sqlite3.Row:
        rows = self.query("SELECT * FROM runs WHERE id = ?", (run_id,))
        if not rows:
            raise KeyError(f"no run {run_id!r} in {self.path}")
        return rows[0]

    def runs(self) -> list[sqlite3.Row]:
        """Every run, oldest first."""
        return self.query("SELECT * FROM runs ORDER BY started, id")

    def unfinished_run(self) -> str | None:
        """The most recent run that did not finish, if any."""
        rows = self.query("SELECT id FROM runs WHERE finished IS NULL ORDER BY started DESC LIMIT 1")
        return rows[0]["id"] if rows else None

    def run_problems(self, run_id: str) -> list[Problem]:
        rows = self.query("SELECT p.* FROM problems p JOIN run_problems r ON r.problem_key = p.key "
                          "WHERE r.run_id = ? ORDER BY p.m * p.n * p.k, p.key", (run_id,))
        return [Problem(r["layout"], r["dtype"], r["m"], r["n"], r["k"]) for r in rows]

    def add_elapsed(self, run_id: str, seconds: float) -> None:
        self._write("UPDATE runs SET elapsed_s = elapsed_s + ? WHERE id = ?", (seconds, run_id))

    def finish_run(self, run_id: str) -> None:
        self._write("UPDATE runs SET finished = ? WHERE id = ?", (time.time(), run_id))

    # candidates and compiles
    def add_candidate(self, cand: Candidate) -> None:
        """Records a candidate (the first provenance that proposed it is kept)."""
        source_hash = hashlib.sha256(cand.source.encode()).hexdigest() if cand.source else ""
        self._write("INSERT OR IGNORE INTO candidates VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (cand.id, cand.build_key, cand.config, json.dumps(list(cand.knobs)), source_hash, cand.source,
                     cand.source_name, cand.provenance, time.time()))

    def candidate(self, candidate_id: str) -> Candidate:
        row = self.query("SELECT * FROM candidates WHERE id = ?", (candidate_id,))[0]
        return Candidate(config=row["config"], knobs=tuple(json.loads(row["knobs"])), source=row["source"],
                         source_name=row["source_name"], provenance=row["provenance"])

    def add_compile(self, build_key: str, outcome: CompileOutcome, run_id: str, prebuilt: bool = False) -> None:
        """Records a build (compiled by `run_id`, or `prebuilt`: already in the extension's kernel library)."""
        self._write("INSERT OR IGNORE INTO compiles VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
                    (build_key, int(outcome.ok), outcome.artifact, outcome.log, outcome.seconds, time.time(), run_id,
                     int(prebuilt)))

    def new_builds(self, run_id: str) -> int:
        """How many builds `run_id` compiled (prebuilt kernels not counted)."""
        return self.query("SELECT COUNT(*) FROM compiles WHERE run_id = ? AND prebuilt = 0", (run_id,))[0][0]

    def built_keys(self) -> set[str]:
        """Every build key that compiled (or was prebuilt)."""
        return {r[0] for r in self.query("SELECT build_key FROM compiles WHERE ok = 1")}

    def compile_outcome(self, build_key: str) -> CompileOutcome | None:
        """The recorded compile of a build key, or None when it was never compiled."""
        rows = self.query("SELECT * FROM compiles WHERE build_key = ?", (build_key,))
        if not rows:
            return None
        r = rows[0]
        return CompileOutcome(bool(r["ok"]), r["artifact"], r["log"], r["seconds"])

    # evaluations, proposals, policy
    def add_evaluation(self, run_id: str, round_: int, cand: Candidate, problem: Problem, result: EvalResult,
                       reward: float) -> None:
        """Records one verdict (the candidate row must exist)."""
        self._write(
            "INSERT INTO evaluations (run_id, round, candidate_id, problem_key, provenance, status, reason, us, "
            "baseline_us, case_speedups, max_rel_err, reward, gpu, compile_s, eval_s, created) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (run_id, round_, cand.id, problem.key, cand.provenance, result.status, result.reason, result.us,
             result.baseline_us, json.dumps(result.case_speedups), result.max_rel_err, reward,
             json.dumps(result.gpu, sort_keys=True), result.compile_s, result.eval_s, time.time()))

    def evaluations(self, run_id: str | None = None) -> list[sqlite3.Row]:
        """Every evaluation (of one run, or all), in the order recorded."""
        if run_id is None:
            return self.query("SELECT * FROM evaluations ORDER BY id")
        return self.query("SELECT * FROM evaluations WHERE run_id = ? ORDER BY id", (run_id,))

    def evaluation_count(self, run_id: str) -> int:
        return self.query("SELECT COUNT(*) FROM evaluations WHERE run_id = ?", (run_id,))[0][0]

    def last_round(self, run_id: str) -> int:
        """The highest round with a recorded evaluation or proposal (-1 for a fresh run)."""
        row = self.query("SELECT MAX(r) FROM (SELECT MAX(round) AS r FROM evaluations WHERE run_id = ? UNION ALL "
                         "SELECT MAX(round) FROM proposals WHERE run_id = ?)", (run_id, run_id))[0][0]
        return -1 if row is None else row

    def tried(self, run_id: str) -> dict[str, set[str]]:
        """Problem key -> candidate ids already proposed or evaluated for it in this run."""
        out: dict[str, set[str]] = {}
        for r in self.query("SELECT problem_key, candidate_id FROM evaluations WHERE run_id = ? UNION "
                            "SELECT problem_key, candidate_id FROM proposals WHERE run_id = ? AND candidate_id "
                            "IS NOT NULL", (run_id, run_id)):
            out.setdefault(r["problem_key"], set()).add(r["candidate_id"])
        return out

    def add_proposal(self, run_id: str, round_: int, problem: Problem, proposal: Proposal, provenance: str) -> None:
        """Records a proposer's answer: its candidate, or why it was rejected (status/reason), with the LLM's prompt
        and completion when there was one."""
        cand = proposal.candidate
        self._write("INSERT INTO proposals (run_id, round, problem_key, provenance, candidate_id, status, reason, "
                    "prompt, completion, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (run_id, round_, problem.key, provenance, cand.id if cand else None, proposal.status,
                     proposal.reason, proposal.prompt, proposal.completion, time.time()))

    def proposals(self, run_id: str | None = None) -> list[sqlite3.Row]:
        if run_id is None:
            return self.query("SELECT * FROM proposals ORDER BY id")
        return self.query("SELECT * FROM proposals WHERE run_id = ? ORDER BY id", (run_id,))

    def save_policy(self, run_id: str, round_: int, state: dict[str, Any]) -> None:
        self._write("INSERT INTO policy_snapshots (run_id, round, state, created) VALUES (?, ?, ?, ?)",
                    (run_id, round_, json.dumps(state), time.time()))

    def latest_policy(self, run_id: str) -> dict[str, Any] | None:
        rows = self.query("SELECT state FROM policy_snapshots WHERE run_id = ? ORDER BY id DESC LIMIT 1", (run_id,))
        return json.loads(rows[0]["state"]) if rows else None

    def best_per_problem(self, run_id: str | None = None) -> Iterator[sqlite3.Row]:
        """Per (run, problem): the fastest OK evaluation (us, baseline_us, candidate)."""
        where = "AND e.run_id = ?" if run_id else ""
        return iter(self.query(
            "SELECT e.* FROM evaluations e WHERE e.status = 'ok' " + where + " AND e.us = (SELECT MIN(us) FROM "
            "evaluations f WHERE f.run_id = e.run_id AND f.problem_key = e.problem_key AND f.status = 'ok') "
            "GROUP BY e.run_id, e.problem_key ORDER BY e.run_id, e.problem_key", (run_id,) if run_id else ()))
