"""The LLM's contextual memory file: seed notes, then facts measured in the store (best speedup per family, the most
frequent rejection reasons), tolerant of a store whose tables are not there yet."""
from __future__ import annotations

import sqlite3

from search.candidate import INCORRECT, OK, SCAN_REJECTED, Candidate, EvalResult, Problem, Proposal
from search.llm import memory
from search.store import Store

PROBLEM = Problem("nt", "fp16", 64, 4096, 4096)


def test_read_gives_the_seed_until_the_file_exists(tmp_path):
    assert memory.read(tmp_path / "memory.md") == memory.SEED.read_text()
    (tmp_path / "memory.md").write_text("learned")
    assert memory.read(tmp_path / "memory.md") == "learned"


def test_update_appends_measured_facts(tmp_path):
    store = Store(":memory:")
    run = store.create_run("rl", {}, {}, [PROBLEM])
    fast = Candidate(config="sm80_cute_fp16_nt_64x64x64_s3_w4")
    slow = Candidate(config="sm80_cute_fp16_nt_64x128x64_s3_w4")
    wrong = Candidate(source="...", source_name="k")
    for cand in (fast, slow, wrong):
        store.add_candidate(cand)
    store.add_evaluation(run, 0, fast, PROBLEM, EvalResult(OK, us=8.0, baseline_us=10.0), 1.0)
    store.add_evaluation(run, 0, slow, PROBLEM, EvalResult(OK, us=20.0, baseline_us=10.0), 0.0)
    store.add_evaluation(run, 0, wrong, PROBLEM, EvalResult(INCORRECT, reason="exact check: 3 outputs differ"), 0.0)
    store.add_proposal(run, 0, PROBLEM, Proposal(None, SCAN_REJECTED, "line 3: host synchronisation: x"), "llm:m")
    path = tmp_path / "memory.md"
    memory.update(store, path)
    text = path.read_text()
    assert text.startswith(memory.SEED.read_text())
    assert "sm80_cute: best speedup over cuBLASLt-autotune so far 1.250x" in text
    assert "incorrect: exact check: 3 outputs differ" in text and "scan_rejected: line 3: host synchronisation" in text


def test_update_tolerates_a_store_without_tables(tmp_path):
    class EmptyStore:
        def query(self, sql, params=()):
            raise sqlite3.OperationalError("no such table: evaluations")

    memory.update(EmptyStore(), tmp_path / "m.md")
    assert (tmp_path / "m.md").read_text() == memory.SEED.read_text()
