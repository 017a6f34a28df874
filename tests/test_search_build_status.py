"""A failed build's status, from the compile farm to the stored verdict: a source the farm refused for a banned
construct is SCAN_REJECTED with the refusal as its reason (in this run and in any later run that meets the stored
build), a build that does not compile is a COMPILE_ERROR."""
from __future__ import annotations

import pytest

from search.backend import REFUSED, CompileOutcome
from search.candidate import COMPILE_ERROR, OK, SCAN_REJECTED, Candidate, Problem
from search.compile_farm import CompileFarm
from search.loop import RunArgs, Search
from search.simulate import SimulatedBackend
from search.store import Store

PROBLEMS = [Problem("nt", "fp16", m, n, k) for m, n, k in ((64, 4096, 4096), (1024, 128, 64), (4096, 4096, 4096))]
STREAM_CHEAT = """#include <cuda_runtime.h>
void side_stream() { cudaStream_t s; cudaStreamCreate(&s); }
"""


def test_a_failed_build_names_its_status():
    assert CompileOutcome(False, log="nvcc: error").status == COMPILE_ERROR
    assert CompileOutcome(False, status=SCAN_REJECTED).status == SCAN_REJECTED
    assert CompileOutcome(True, artifact="a.so").status == ""
    with pytest.raises(ValueError, match="no failure status"):
        CompileOutcome(True, status=SCAN_REJECTED)
    with pytest.raises(ValueError, match="unknown build failure status 'hang'"):
        CompileOutcome(False, status="hang")


def test_the_farm_gives_refusals_and_compile_errors_their_status(tmp_path):
    """No nvcc needed: the source is refused by the scan of its text, the config does not exist."""
    farm = CompileFarm(tmp_path, ["80"], jobs=1)
    cheat = Candidate(source=STREAM_CHEAT, source_name="cheat")
    broken = Candidate(config="not_a_config")
    outcomes = farm.compile([cheat, broken])
    assert outcomes[cheat.build_key].status == SCAN_REJECTED
    assert outcomes[cheat.build_key].log.startswith(REFUSED) and "cudaStreamCreate" in outcomes[cheat.build_key].log
    assert outcomes[broken.build_key].status == COMPILE_ERROR


class RefusingBackend(SimulatedBackend):
    """The simulated backend, whose compile farm refuses every other new build (sorted by build key) as a cheat."""

    def __init__(self):
        super().__init__()
        self.refused: set[str] = set()
        self.compiled: list[str] = []

    def compile(self, candidates):
        outcomes = super().compile(candidates)
        self.compiled += list(outcomes)
        for key in sorted(outcomes)[::2]:
            self.refused.add(key)
            outcomes[key] = CompileOutcome(False, log=f"{REFUSED} (banned constructs): host pass: line 3: dlsym",
                                           seconds=0.5, status=SCAN_REJECTED)
        return outcomes


def test_refused_builds_are_stored_as_scan_rejected_with_their_reason():
    store, backend = Store(":memory:"), RefusingBackend()
    args = RunArgs(policy="random", budget_evals=30, seed=3)
    first = Search.start(store, backend, args, PROBLEMS)
    first.run()
    rows = store.evaluations(first.run_id)
    refused_rows = [r for r in rows if r["candidate_id"].split("@")[0] in backend.refused]
    assert refused_rows and all(r["status"] == SCAN_REJECTED and "dlsym" in r["reason"] for r in refused_rows)
    assert all(r["status"] != SCAN_REJECTED for r in rows if r["candidate_id"].split("@")[0] not in backend.refused)
    assert OK in {r["status"] for r in rows}
    assert all(store.compile_outcome(key).status == SCAN_REJECTED for key in backend.refused)
    # a later run meets the stored refusals: judged from the store, never compiled again
    backend.compiled = []
    again = Search.start(store, backend, args, PROBLEMS)
    again.run()
    met = [r for r in store.evaluations(again.run_id) if r["candidate_id"].split("@")[0] in backend.refused]
    assert met and all(r["status"] == SCAN_REJECTED and "dlsym" in r["reason"] for r in met)
    assert not set(backend.compiled) & {r["candidate_id"].split("@")[0] for r in met}
