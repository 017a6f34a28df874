"""The local backend hands back each verdict as its worker answers (`evaluate_iter`), and the search loop stores each
as it arrives, on CPU: evaluation workers in the eval_worker's self-test mode (CUDAL2_EVAL_WORKER_SELFTEST=1)."""
from __future__ import annotations

import threading

import pytest

from search.backend import CompileOutcome
from search.backends.local import LocalBackend
from search.candidate import HANG, OK, SCAN_REJECTED, Candidate, Problem
from search.eval_worker import SELFTEST_ENV
from search.evaluator import Worker
from search.loop import RunArgs, Search
from search.store import Store

SELFTEST = {SELFTEST_ENV: "1"}
PROBLEMS = [Problem("nt", "fp16", 64, 4096, 4096), Problem("nt", "fp16", 128, 4096, 4096)]


def local_backend(artifacts, gpus: list[str], monkeypatch, refused: frozenset[str] = frozenset(),
                  timeout_s: float = 30.0) -> LocalBackend:
    """A LocalBackend on self-test workers whose builds are empty files (those named in `refused`: refused sources)
    and whose environment says sm90, so the loop accepts it."""
    backend = LocalBackend(artifacts, arch=90, gpus=gpus, timeout_s=timeout_s, worker_env=SELFTEST)
    backend.farm.prebuilt = {}

    def fake_build(cand: Candidate) -> CompileOutcome:
        if cand.build_key in refused:
            return CompileOutcome(False, log="REFUSED (banned constructs): line 1: dlsym", seconds=0.1,
                                  status=SCAN_REJECTED)
        library = artifacts / f"{cand.build_key}.so"
        library.write_bytes(b"")
        return CompileOutcome(True, artifact=str(library), log="built", seconds=0.1)

    monkeypatch.setattr(backend.farm, "build", fake_build)
    monkeypatch.setattr(backend, "environment", lambda: {"arch": 90, "gpu_name": "selftest"})
    return backend


def test_each_verdict_comes_back_as_its_worker_answers(tmp_path, monkeypatch):
    """A hang on one GPU holds back nothing but its own batch: the refused build's verdict comes first (no GPU
    needed), the other GPU's batch (the other problem's two candidates) next, the hang's last, when its time limit
    kills the worker."""
    cheat = Candidate(source="int x;", source_name="cheat")
    backend = local_backend(tmp_path, ["0", "1"], monkeypatch, refused=frozenset({cheat.build_key}), timeout_s=10.0)
    requests = [(Candidate(config="selftest_hang"), PROBLEMS[0]), (cheat, PROBLEMS[0]),
                (Candidate(config="fine_a"), PROBLEMS[1]), (Candidate(config="fine_b"), PROBLEMS[1])]
    try:
        backend.compile([c for c, _ in requests])
        verdicts = list(backend.evaluate_iter(requests))
    finally:
        backend.close()
    order = [i for i, _ in verdicts]
    statuses = {i: r.status for i, r in verdicts}
    assert sorted(order) == [0, 1, 2, 3] and order[0] == 1 and order[-1] == 0, order
    assert statuses == {0: HANG, 1: SCAN_REJECTED, 2: OK, 3: OK}
    assert "dlsym" in dict(verdicts)[1].reason


def test_the_loop_stores_each_local_verdict_before_the_next_arrives(tmp_path, monkeypatch):
    """The loop takes the local backend's verdicts one by one: the worker's second verdict is handed over only once
    the first is in the store (it would wait in vain if the loop stored verdicts only when a chunk returns).
    Interrupted at its third verdict (as by a kill), the store holds the verdicts delivered so far; a resume on the
    same backend (the abandoned iteration left its workers usable) spends the rest of the budget."""
    artifacts = tmp_path / "artifacts"
    artifacts.mkdir()
    backend = local_backend(artifacts, ["0"], monkeypatch)
    store = Store(tmp_path / "s.db")
    counts: list[int] = []
    first_stored, waits = threading.Event(), []
    judge, handed = Worker.judge, []

    def gated(worker: Worker, payload: dict, timeout_s: float):
        for result in judge(worker, payload, timeout_s):
            if handed and not first_stored.is_set():   # a later verdict of the first chunk
                waits.append(first_stored.wait(20.0))
            handed.append(result)
            yield result

    def on_eval(count: int, _geomean: float) -> None:
        counts.append(store.evaluation_count(search.run_id))
        first_stored.set()
        if count == 3:
            raise KeyboardInterrupt

    monkeypatch.setattr(Worker, "judge", gated)

    try:
        search = Search.start(store, backend, RunArgs(policy="random", per_round=3, budget_evals=6), PROBLEMS,
                              on_eval=on_eval)
        with pytest.raises(KeyboardInterrupt):
            search.run()
        assert counts == [1, 2, 3] and store.evaluation_count(search.run_id) == 3 and all(waits)
        assert {r["status"] for r in store.evaluations(search.run_id)} == {OK}
        Search.resume(store, backend, search.run_id).run()
        assert store.evaluation_count(search.run_id) == 6
    finally:
        backend.close()
        store.close()
