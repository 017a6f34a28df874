"""The search's SQLite store (WAL): runs, problems, candidates, compiles, evaluations, proposals, policy snapshots.

Every write is its own short transaction, committed before the call returns (a verdict with the run time it took, a
problem's proposals of a round all at once), so a run killed at any moment (SIGKILL included) loses at most the
evaluations in flight; `python -m search resume` continues from what is here. One evaluation per (run, candidate,
problem) and one compile per build key are enforced by the schema.

One writer per store: a writer holds an OS lock on `<store>.lock` (released by the OS when the process dies, however
it dies), and a second writer is refused with a StoreError naming the holder. Readers (`readonly=True`) open the file
through SQLite's read-only URI and never create it. Before either uses a file it is checked: it must exist (readers),
be an SQLite database of this application (`application_id`) or an older store with the search's tables, not be
truncated, and pass `PRAGMA quick_check`; anything else is a StoreError naming the file and what is wrong.

Text from outside is stored truncated: a candidate's source and an LLM's completion keep their first TEXT_CAP
characters and a marker saying how many more were cut (`clip`), so a huge answer cannot bloat the store or what is
exported from it. A source's hash is that of the whole text; a source over `source_build.MAX_SOURCE_CHARS` (no more
than TEXT_CAP) is refused when proposed, so every candidate that is compiled or evaluated is stored whole.
A failed build's row keeps its status (COMPILE_ERROR, or SCAN_REJECTED for a source the compile farm refused); an
older store gets that column when a writer opens it.
"""
from __future__ import annotations

import contextlib
import fcntl
import gzip
import hashlib
import json
import os
import sqlite3
import tempfile
import time
import urllib.parse
import uuid
from pathlib import Path
from typing import Any, Iterator

from search.backend import REFUSED, CompileOutcome
from search.candidate import COMPILE_ERROR, SCAN_REJECTED, Candidate, EvalResult, Problem, Proposal
from search.errors import UserError

APPLICATION_ID = 0x63643273   # "cd2s" in the SQLite header: a cudal2 search store
SQLITE_MAGIC = b"SQLite format 3\x00"
TABLES = ("runs", "problems", "run_problems", "candidates", "compiles", "evaluations", "proposals", "policy_snapshots")
TEXT_CAP = 100_000   # characters kept of a candidate's source and of an LLM completion

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
    seconds REAL NOT NULL, created REAL NOT NULL, run_id TEXT NOT NULL, prebuilt INTEGER NOT NULL,
    status TEXT NOT NULL DEFAULT '');
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
CREATE TABLE IF NOT EXISTS baselines (
    fingerprint TEXT NOT NULL, problem_key TEXT NOT NULL, doc TEXT NOT NULL, created REAL NOT NULL,
    PRIMARY KEY (fingerprint, problem_key));
"""


def clip(text: str, cap: int = TEXT_CAP) -> str:
    """`text` as the store keeps it: whole up to `cap` characters, else its first `cap` and a marker saying how many
    more were cut."""
    if len(text) <= cap:
        return text
    return f"{text[:cap]}\n[... {len(text) - cap} more characters cut: the store keeps the first {cap}]"


class StoreError(UserError):
    """A store file that cannot be used: missing, not a search store, truncated, corrupt, or held by another
    writer."""


def check_header(path: Path) -> bool:
    """Checks what the file's SQLite header says without opening it through SQLite (so nothing is created beside
    it); returns False for an empty file (a store killed before its first write), raises StoreError for a file that
    is not an SQLite database, belongs to another application or is shorter than its header says."""
    size = path.stat().st_size
    if size == 0:
        return False
    with path.open("rb") as f:
        header = f.read(100)
    if len(header) < 100 or not header.startswith(SQLITE_MAGIC):
        raise StoreError(f"{path} is not a search store (not an SQLite database)")
    page_size = int.from_bytes(header[16:18], "big")
    page_size = 65536 if page_size == 1 else page_size
    application_id = int.from_bytes(header[68:72], "big")
    if application_id not in (0, APPLICATION_ID):
        raise StoreError(f"{path} is an SQLite database of another application (application_id {application_id:#x}), "
                         "not a search store")
    if page_size < 512 or page_size & (page_size - 1):
        raise StoreError(f"{path} is corrupt (its header's page size is {page_size})")
    pages, counter, valid_for = (int.from_bytes(header[a:a + 4], "big") for a in (28, 24, 92))
    wal = Path(f"{path}-wal")
    checkpointed = not wal.exists() or wal.stat().st_size == 0  # else SQLite finishes the file from the WAL
    if checkpointed and (size % page_size or (pages and counter == valid_for and size < pages * page_size)):
        raise StoreError(f"{path} is truncated ({size} bytes; its header says {pages} pages of {page_size} bytes)")
    return True


class Store:
    """A search store at `path` (":memory:" for a throwaway one): read-write (the one writer, created if missing) or
    `readonly` (an existing store, opened read-only). Raises StoreError for a file it cannot use."""

    def __init__(self, path: str | Path, readonly: bool = False):
        self.path, self.readonly = str(path), readonly
        self._lock_fd: int | None = None
        if self.path == ":memory:":
            if readonly:
                raise StoreError("a read-only store needs a file, not :memory:")
            self.db = self._connect(self.path)
            self._create_schema()
            return
        file = Path(self.path)
        if file.is_dir():
            raise StoreError(f"{file} is a folder, not a search store file")
        if readonly and not file.exists():
            raise StoreError(f"{file} does not exist (no search store there)")
        if not file.parent.is_dir():
            raise StoreError(f"{file}: the folder {file.parent} does not exist")
        if not readonly:
            self._lock()
        try:
            self._open(file)
        except BaseException:
            self._unlock()
            raise

    def _open(self, file: Path) -> None:
        """Checks and opens the file. While no WAL file is beside it (no writer alive, nothing left uncheckpointed)
        the checks run on an `immutable` read-only connection, which creates nothing, so a damaged file is refused
        leaving no trace; a reader's connection then lets SQLite add its WAL index files (-wal, -shm) beside a valid
        store, as any reader of a WAL database does, but never writes the store file."""
        has_content = file.exists() and check_header(file)
        if self.readonly and not has_content:
            raise StoreError(self._empty())
        uri = f"file:{urllib.parse.quote(str(file.resolve()))}?mode=ro"
        checked = has_content and not Path(f"{file}-wal").exists()
        if checked:
            checker = self._connect(uri + "&immutable=1", uri=True)
            try:
                self._check(checker, integrity=True)
            finally:
                checker.close()
        self.db = self._connect(uri if self.readonly else self.path, uri=self.readonly)
        self._check(self.db, integrity=not checked)
        if not self.readonly:
            self.db.execute("PRAGMA journal_mode=WAL")
            self._create_schema()

    def _empty(self) -> str:
        return (f"{self.path} is empty: no search store was recorded there (a run killed before it created its "
                "tables leaves an empty file; start a new run on it)")

    @staticmethod
    def _connect(target: str, uri: bool = False) -> sqlite3.Connection:
        db = sqlite3.connect(target, isolation_level=None, timeout=30.0, uri=uri)
        db.row_factory = sqlite3.Row
        return db

    def _lock(self) -> None:
        """Takes the writer lock `<store>.lock` (or raises StoreError naming the process that holds it)."""
        lock_path = f"{self.path}.lock"
        try:
            fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o644)
        except OSError as exc:
            raise StoreError(f"{lock_path}: cannot create the store's lock file ({exc.strerror})") from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 200, 0).decode(errors="replace").strip() or "another process"
            os.close(fd)
            raise StoreError(f"{self.path} is in use by another search run or resume ({holder}); one writer per "
                             "store: wait for it to finish, or use another --store") from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()}, since {time.strftime('%Y-%m-%d %H:%M:%S')}\n".encode(), 0)
        self._lock_fd = fd

    def _unlock(self) -> None:
        if self._lock_fd is not None:
            os.close(self._lock_fd)  # closing the descriptor releases the flock
            self._lock_fd = None

    def _check(self, db: sqlite3.Connection, integrity: bool) -> None:
        """Refuses an opened file that fails `PRAGMA quick_check` (with `integrity`) or is not a search store: a
        reader needs every table, a writer a store of this application, an older one with its tables, or none."""
        try:
            problems = [r[0] for r in db.execute("PRAGMA quick_check").fetchall()] if integrity else ["ok"]
            tables = {r[0] for r in db.execute("SELECT name FROM sqlite_master WHERE type = 'table'")}
            application_id = db.execute("PRAGMA application_id").fetchone()[0]
        except sqlite3.DatabaseError as exc:
            raise StoreError(f"{self.path} is corrupt or not a search store ({exc})") from None
        if problems != ["ok"]:
            raise StoreError(f"{self.path} is corrupt (PRAGMA quick_check: {problems[0]})")
        missing = [t for t in TABLES if t not in tables]
        if missing and tables and application_id != APPLICATION_ID and not {"runs", "evaluations"} <= tables:
            raise StoreError(f"{self.path} is an SQLite database but not a search store (no {missing[0]} table)")
        if self.readonly and not tables:
            raise StoreError(self._empty())
        if self.readonly and missing:
            raise StoreError(f"{self.path} is not a complete search store (no {missing[0]} table)")

    def _create_schema(self) -> None:
        """The tables, the application id and the pragmas of a writer, created in one transaction."""
        self.db.execute("PRAGMA synchronous=NORMAL")
        self.db.execute("PRAGMA foreign_keys=ON")
        try:
            self.db.executescript(f"BEGIN IMMEDIATE; {SCHEMA} PRAGMA application_id = {APPLICATION_ID}; COMMIT;")
        except sqlite3.Error:
            if self.db.in_transaction:
                self.db.execute("ROLLBACK")
            raise
        self._migrate()

    def _migrate(self) -> None:
        """Brings an older store's tables to this schema: a `status` column on compiles, filled for its failed builds
        (SCAN_REJECTED where the compile farm's log says it refused the source, else COMPILE_ERROR)."""
        if "status" in {r["name"] for r in self.db.execute("PRAGMA table_info(compiles)")}:
            return
        with self._transaction():
            self.db.execute("ALTER TABLE compiles ADD COLUMN status TEXT NOT NULL DEFAULT ''")
            self.db.execute("UPDATE compiles SET status = CASE WHEN substr(log, 1, ?) = ? THEN ? ELSE ? END "
                            "WHERE ok = 0", (len(REFUSED), REFUSED, SCAN_REJECTED, COMPILE_ERROR))

    def close(self) -> None:
        """Closes the database and releases the writer lock."""
        self.db.close()
        self._unlock()

    @contextlib.contextmanager
    def _transaction(self) -> Iterator[None]:
        """One explicit transaction (the connection is in autocommit mode): committed at the end of the block, rolled
        back if it raises."""
        self.db.execute("BEGIN IMMEDIATE")
        try:
            yield
        except BaseException:
            self.db.execute("ROLLBACK")
            raise
        self.db.execute("COMMIT")

    def _write(self, sql: str, params: tuple = ()) -> sqlite3.Cursor:
        """One statement in its own committed transaction."""
        with self._transaction():
            return self.db.execute(sql, params)

    def query(self, sql: str, params: tuple = ()) -> list[sqlite3.Row]:
        """Rows of a read-only query."""
        return self.db.execute(sql, params).fetchall()

    # runs and problems
    def create_run(self, policy: str, args: dict[str, Any], environment: dict[str, Any],
                   problems: list[Problem]) -> str:
        """A new run over `problems` (args: the CLI's, enough to resume); returns its id."""
        run_id = time.strftime("%Y%m%d-%H%M%S-") + uuid.uuid4().hex[:6]
        with self._transaction():
            self.db.execute("INSERT INTO runs (id, policy, args, environment, started) VALUES (?, ?, ?, ?, ?)",
                            (run_id, policy, json.dumps(args, sort_keys=True), json.dumps(environment), time.time()))
            for p in problems:
                self.db.execute("INSERT OR IGNORE INTO problems VALUES (?, ?, ?, ?, ?, ?)",
                                (p.key, p.layout, p.dtype, p.m, p.n, p.k))
                self.db.execute("INSERT OR IGNORE INTO run_problems VALUES (?, ?)", (run_id, p.key))
        return run_id

    def run(self, run_id: str) -> sqlite3.Row:
        """The run `run_id` (StoreError listing the store's runs when there is none of that id)."""
        rows = self.query("SELECT * FROM runs WHERE id = ?", (run_id,))
        if not rows:
            ids = [r["id"] for r in self.runs()]
            known = f"its runs: {', '.join(ids[-5:])}" if ids else "it holds no run"
            raise StoreError(f"no run {run_id!r} in {self.path} ({known})")
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
    def _insert_candidate(self, cand: Candidate) -> None:
        source_hash = hashlib.sha256(cand.source.encode()).hexdigest() if cand.source else ""
        self.db.execute("INSERT OR IGNORE INTO candidates VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                        (cand.id, cand.build_key, cand.config, json.dumps(list(cand.knobs)), source_hash,
                         clip(cand.source), cand.source_name, cand.provenance, time.time()))

    def add_candidate(self, cand: Candidate) -> None:
        """Records a candidate (the first provenance that proposed it is kept)."""
        with self._transaction():
            self._insert_candidate(cand)

    def candidate(self, candidate_id: str) -> Candidate:
        """The stored candidate `candidate_id` (a source cut by `clip` comes back cut: only refused proposals')."""
        row = self.query("SELECT * FROM candidates WHERE id = ?", (candidate_id,))[0]
        return Candidate(config=row["config"], knobs=tuple(json.loads(row["knobs"])), source=row["source"],
                         source_name=row["source_name"], provenance=row["provenance"])

    def add_compile(self, build_key: str, outcome: CompileOutcome, run_id: str, prebuilt: bool = False) -> None:
        """Records a build (compiled by `run_id`, or `prebuilt`: already in the extension's kernel library) with its
        status."""
        self._write("INSERT OR IGNORE INTO compiles (build_key, ok, artifact, log, seconds, created, run_id, prebuilt, "
                    "status) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (build_key, int(outcome.ok), outcome.artifact, outcome.log, outcome.seconds, time.time(), run_id,
                     int(prebuilt), outcome.status))

    def new_builds(self, run_id: str) -> int:
        """How many builds `run_id` compiled (prebuilt kernels not counted)."""
        return self.query("SELECT COUNT(*) FROM compiles WHERE run_id = ? AND prebuilt = 0", (run_id,))[0][0]

    def built_keys(self) -> set[str]:
        """Every build key that compiled (or was prebuilt)."""
        return {r[0] for r in self.query("SELECT build_key FROM compiles WHERE ok = 1")}

    def compiled_candidates(self) -> list[Candidate]:
        """One candidate of each build this store's runs compiled successfully (prebuilt kernels left out): what a
        machine without their artifacts has to rebuild."""
        rows = self.query("SELECT MIN(c.id) AS id FROM candidates c JOIN compiles k ON k.build_key = c.build_key "
                          "WHERE k.ok = 1 AND k.prebuilt = 0 GROUP BY c.build_key ORDER BY c.build_key")
        return [self.candidate(r["id"]) for r in rows]

    def compile_outcome(self, build_key: str) -> CompileOutcome | None:
        """The recorded compile of a build key, or None when it was never compiled."""
        rows = self.query("SELECT * FROM compiles WHERE build_key = ?", (build_key,))
        if not rows:
            return None
        r = rows[0]
        return CompileOutcome(bool(r["ok"]), r["artifact"], r["log"], r["seconds"], r["status"])

    # the judge's baselines (search.baseline_cache)
    def add_baseline(self, doc: dict[str, Any]) -> None:
        """Keeps a judge's baseline document (the first of its fingerprint and problem)."""
        self._write("INSERT OR IGNORE INTO baselines (fingerprint, problem_key, doc, created) VALUES (?, ?, ?, ?)",
                    (doc["fingerprint"], doc["problem"], json.dumps(doc, sort_keys=True), time.time()))

    def baselines(self) -> list[dict[str, Any]]:
        """Every baseline document (none in a store older than the table, opened read-only)."""
        if not self.query("SELECT name FROM sqlite_master WHERE type = 'table' AND name = 'baselines'"):
            return []
        return [json.loads(r["doc"]) for r in self.query("SELECT doc FROM baselines ORDER BY created")]

    # evaluations, proposals, policy
    def add_evaluation(self, run_id: str, round_: int, cand: Candidate, problem: Problem, result: EvalResult,
                       reward: float, elapsed_s: float = 0.0) -> None:
        """Records one verdict (the candidate row must exist) and adds `elapsed_s` to the run's time, in one
        transaction."""
        with self._transaction():
            self.db.execute(
                "INSERT INTO evaluations (run_id, round, candidate_id, problem_key, provenance, status, reason, us, "
                "baseline_us, case_speedups, max_rel_err, reward, gpu, compile_s, eval_s, created) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (run_id, round_, cand.id, problem.key, cand.provenance, result.status, result.reason, result.us,
                 result.baseline_us, json.dumps(result.case_speedups), result.max_rel_err, reward,
                 json.dumps(result.gpu, sort_keys=True), result.compile_s, result.eval_s, time.time()))
            self.db.execute("UPDATE runs SET elapsed_s = elapsed_s + ? WHERE id = ?", (elapsed_s, run_id))

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

    def add_proposals(self, run_id: str, round_: int, problem: Problem, proposals: list[tuple[Proposal, str]],
                      elapsed_s: float = 0.0) -> None:
        """Records a problem's proposals of one round, (proposal, provenance label) each, with their candidates, and
        adds `elapsed_s` to the run's time, in one transaction (a killed run has all of a problem's proposals of a
        round, or none): each a candidate, or why it was rejected (status/reason), with the LLM's prompt and
        completion (cut by `clip`) when there was one."""
        with self._transaction():
            self.db.execute("UPDATE runs SET elapsed_s = elapsed_s + ? WHERE id = ?", (elapsed_s, run_id))
            for proposal, provenance in proposals:
                cand = proposal.candidate
                if cand is not None:
                    self._insert_candidate(cand)
                self.db.execute(
                    "INSERT INTO proposals (run_id, round, problem_key, provenance, candidate_id, status, reason, "
                    "prompt, completion, created) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                    (run_id, round_, problem.key, provenance, cand.id if cand else None, proposal.status,
                     proposal.reason, proposal.prompt, clip(proposal.completion), time.time()))

    def add_proposal(self, run_id: str, round_: int, problem: Problem, proposal: Proposal, provenance: str) -> None:
        """Records one proposal (see add_proposals)."""
        self.add_proposals(run_id, round_, problem, [(proposal, provenance)])

    def proposed_problems(self, run_id: str, round_: int) -> set[str]:
        """The problem keys that have proposals recorded in round `round_` of the run."""
        return {r[0] for r in self.query("SELECT DISTINCT problem_key FROM proposals WHERE run_id = ? AND round = ?",
                                         (run_id, round_))}

    def unevaluated(self, run_id: str) -> list[sqlite3.Row]:
        """Usable proposals of the run without a verdict (round, candidate_id, problem_key), in proposal order: what a
        stopped run had in flight, or a compile-only run left for the GPU."""
        return self.query(
            "SELECT MIN(p.round) AS round, p.candidate_id, p.problem_key FROM proposals p WHERE p.run_id = ? AND "
            "p.status = '' AND p.candidate_id IS NOT NULL AND NOT EXISTS (SELECT 1 FROM evaluations e WHERE "
            "e.run_id = p.run_id AND e.candidate_id = p.candidate_id AND e.problem_key = p.problem_key) "
            "GROUP BY p.candidate_id, p.problem_key ORDER BY MIN(p.id)", (run_id,))

    def proposals(self, run_id: str | None = None) -> list[sqlite3.Row]:
        if run_id is None:
            return self.query("SELECT * FROM proposals ORDER BY id")
        return self.query("SELECT * FROM proposals WHERE run_id = ? ORDER BY id", (run_id,))

    def save_policy(self, run_id: str, round_: int, state: dict[str, Any]) -> None:
        self._write("INSERT INTO policy_snapshots (run_id, round, state, created) VALUES (?, ?, ?, ?)",
                    (run_id, round_, json.dumps(state), time.time()))

    def snapshot_rounds(self, run_id: str) -> set[int]:
        """The rounds of the run that saved a policy snapshot (rounds that ran to their end)."""
        return {r[0] for r in self.query("SELECT round FROM policy_snapshots WHERE run_id = ?", (run_id,))}

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


def is_store_file(path: str | Path) -> bool:
    """Whether `path` names a search store by its suffix (.sqlite / .db, or their .gz) rather than a results file."""
    return Path(path).name.endswith((".sqlite", ".db", ".sqlite.gz", ".db.gz"))


@contextlib.contextmanager
def read_store(path: str | Path) -> Iterator[Store]:
    """A read-only Store of the file at `path`: a store, or its gzip copy (`.gz`, as results folders keep stores),
    decompressed to a temporary file for the duration."""
    path = Path(path)
    with tempfile.TemporaryDirectory() as tmp:
        if path.suffix == ".gz":
            plain = Path(tmp) / path.stem
            plain.write_bytes(gzip.decompress(path.read_bytes()))
            path = plain
        store = Store(path, readonly=True)
        try:
            yield store
        finally:
            store.close()
