"""The evaluator pool's crash and hang isolation and the local backend's routing, on CPU: workers run in the
eval_worker's self-test mode (CUDAL2_EVAL_WORKER_SELFTEST=1), which crashes or hangs on request."""
from __future__ import annotations

import collections
import json
import time

import pytest

from search.backend import REFUSED, CompileOutcome
from search.backends.local import LocalBackend, nvcc_archs
from search.candidate import COMPILE_ERROR, CRASH, HANG, OK, SCAN_REJECTED, Candidate, Problem
from search.eval_worker import PDL_ENV, SELFTEST_ENV
from search.baseline_cache import BaselineCache, case_seeds
from search.evaluator import EvaluatorPool, Worker

SELFTEST = {SELFTEST_ENV: "1"}
PROBLEM = Problem("nt", "fp16", 64, 4096, 4096)


def test_crash_and_hang_kill_the_worker_not_the_run():
    pool = EvaluatorPool(["0"], timeout_s=3.0, extra_env=SELFTEST)
    try:
        names = ["fine_a", "selftest_crash", "fine_b", "selftest_hang", "fine_c", "selftest_error", "fine_d"]
        start = time.monotonic()
        results = pool.evaluate([(Candidate(config=n), PROBLEM, "/nonexistent.so") for n in names])
        assert [r.status for r in results] == [OK, CRASH, OK, HANG, OK, CRASH, OK]
        assert "illegal memory access" in results[5].reason
        assert "exited with status" in results[1].reason
        assert "no answer within 3 s" in results[3].reason and "killed" in results[3].reason
        assert results[0].gpu == {"gpu_name": "selftest"} and results[0].eval_s >= 0
        assert time.monotonic() - start < 60
        assert pool.environment()["gpu_name"] == "selftest"
    finally:
        pool.close()


def test_requests_are_spread_over_workers_in_order():
    pool = EvaluatorPool(["0", "1"], timeout_s=10.0, extra_env=SELFTEST)
    try:
        results = pool.evaluate([(Candidate(config=f"k{i}"), PROBLEM, "/x.so") for i in range(6)])
        assert [r.status for r in results] == [OK] * 6
        assert all(w.proc is not None for w in pool.workers)
    finally:
        pool.close()
        assert all(w.proc is None for w in pool.workers)


def test_local_backend_evaluates_builds_from_a_carried_manifest(tmp_path):
    (tmp_path / "built.so").write_bytes(b"")
    (tmp_path / "manifest.json").write_text(json.dumps({"nvcc": "release 13.0", "archs": ["90a"], "builds": {
        "built": {"artifact": "built.so", "ok": True, "log": "built.log", "seconds": 1.0},
        "failed": {"artifact": "", "ok": False, "log": "failed.log", "seconds": 1.0}}}))
    backend = LocalBackend(tmp_path, arch=90, gpus=["0"], timeout_s=10.0, worker_env=SELFTEST)
    try:
        results = backend.evaluate([(Candidate(config="built"), PROBLEM), (Candidate(config="not_a_config"), PROBLEM)])
        assert [r.status for r in results] == [OK, COMPILE_ERROR]
        assert "not_a_config" in results[1].reason  # rebuilt on demand, and the build's own error is the reason
        assert backend.environment()["gpu_name"] == "selftest"
    finally:
        backend.close()


def test_builds_lost_with_a_machine_are_rebuilt_before_evaluation(tmp_path, monkeypatch):
    """A resumed run on a fresh machine: the store knows the build, the artifacts folder does not (or its file is
    gone); the backend rebuilds it once and evaluates it."""
    backend = LocalBackend(tmp_path, arch=90, gpus=["0"], timeout_s=10.0, worker_env=SELFTEST)
    built = []

    def fake_build(cand):
        built.append(cand.build_key)
        (tmp_path / f"{cand.build_key}.so").write_bytes(b"")
        return CompileOutcome(True, artifact=str(tmp_path / f"{cand.build_key}.so"), log="built", seconds=0.1)

    monkeypatch.setattr(backend.farm, "build", fake_build)
    try:
        cand = Candidate(config="lost_kernel")
        results = backend.evaluate([(cand, PROBLEM), (cand, Problem("nt", "fp16", 128, 4096, 4096))])
        assert [r.status for r in results] == [OK, OK] and built == [cand.build_key]
        (tmp_path / f"{cand.build_key}.so").unlink()
        assert backend.evaluate([(cand, PROBLEM)])[0].status == OK and built == [cand.build_key] * 2
    finally:
        backend.close()


def test_compile_only_backend_starts_no_worker(tmp_path):
    backend = LocalBackend(tmp_path, arch=80, compile_only=True)
    env = backend.environment()
    assert env["arch"] == 80 and env["compile_only"] and env["archs"] == ["80"]
    with pytest.raises(RuntimeError, match="compile-only"):
        backend.evaluate([(Candidate(config="x"), PROBLEM)])
    assert backend._pool is None
    backend.close()


def test_arch_targets():
    assert nvcc_archs(90) == ["90a"] and nvcc_archs(80) == ["80"] and nvcc_archs(89) == ["89"]
    with pytest.raises(ValueError, match="sm80..sm90"):
        nvcc_archs(100)


def test_prebuilt_kernels_are_evaluated_without_a_compile(tmp_path):
    backend = LocalBackend(tmp_path, arch=90, gpus=["0"], timeout_s=10.0, worker_env=SELFTEST)
    backend.farm.prebuilt = {"installed_kernel": tmp_path / "libinstalled.so"}
    (tmp_path / "libinstalled.so").write_bytes(b"")
    try:
        assert backend.prebuilt() == {"installed_kernel"}
        (result,) = backend.evaluate([(Candidate(config="installed_kernel"), PROBLEM)])
        assert result.status == OK
    finally:
        backend.close()


def test_workers_measure_with_pdl_off_whatever_the_caller_says():
    pool = EvaluatorPool(["0"], timeout_s=10.0, extra_env={**SELFTEST, PDL_ENV: "0"})
    try:
        assert pool.environment()["pdl_disabled"] is True
    finally:
        pool.close()


def test_refused_sources_are_scan_rejected(tmp_path, monkeypatch):
    """A build the compile farm refused for a banned construct is a SCAN_REJECTED verdict, not a compile error."""
    backend = LocalBackend(tmp_path, arch=90, gpus=["0"], timeout_s=10.0, worker_env=SELFTEST)
    monkeypatch.setattr(backend.farm, "build", lambda cand: CompileOutcome(
        False, log=f"{REFUSED} (banned constructs): host pass: line 3: dlsym", seconds=0.1, status=SCAN_REJECTED))
    try:
        cand = Candidate(source="int x;", source_name="cheat")
        (result,) = backend.evaluate([(cand, PROBLEM)])
        assert result.status == SCAN_REJECTED and "dlsym" in result.reason
    finally:
        backend.close()


def test_a_worker_takes_first_the_problems_whose_baseline_its_card_timed():
    """Baselines are per card (search.baseline_cache): a worker picks a batch of a problem its GPU has a baseline for
    before the queue's first, and the first when it has none (no worker waits)."""
    pool = object.__new__(EvaluatorPool)
    pool.workers, pool.cases = [Worker("0"), Worker("1")], 3
    pool.baselines = BaselineCache()
    p, q = Problem("nt", "fp16", 64, 64, 64), Problem("nt", "fp16", 128, 64, 64)
    pool.baselines.add({"fingerprint": "card1", "problem": q.key, "calls": 2, "seeds": case_seeds(q.key, 3),
                        "us": [1.0] * 3, "wall_us": [1.0] * 3})
    requests = [(Candidate(config="k"), p, "lib"), (Candidate(config="k"), q, "lib")]
    pool.workers[1].environment = {"baseline_fingerprint": "card1"}
    todo = collections.deque([[0], [1]])
    assert pool._next_batch(todo, pool.workers[1], requests) == [1] and list(todo) == [[0]]
    todo = collections.deque([[0], [1]])
    assert pool._next_batch(todo, pool.workers[0], requests) == [0]   # no baseline of its card yet: the first


class FakeRunner:
    """A runner client that records what the judge asked of it."""

    def __init__(self, unmap_ok: bool = True, map_error: str = ""):
        self.calls: list[str] = []
        self.unmap_ok, self.map_error = unmap_ok, map_error

    def unmap(self) -> bool:
        self.calls.append("unmap")
        return self.unmap_ok

    def map(self, regions, timeout_s):
        self.calls.append(f"map {len(regions)} {timeout_s}")
        if self.map_error:
            raise LookupError(self.map_error)

    def close(self):
        self.calls.append("close")


def test_a_passing_config_candidates_runner_is_kept_for_the_next_batch_with_its_regions():
    from search.eval_worker import GpuEvaluator

    judge = object.__new__(GpuEvaluator)
    judge.kept_runner = None
    runner = FakeRunner()
    judge._keep_runner(runner)
    assert judge.kept_runner is runner and runner.calls == ["unmap"]
    assert judge._kept_runner_for(["r0", "r1", "r2"], 7.0) is runner and judge.kept_runner is None
    assert runner.calls == ["unmap", "map 3 7.0"]
    assert judge._kept_runner_for(["r0"], 7.0) is None   # nothing kept: a fresh runner starts


def test_a_runner_that_cannot_close_or_map_its_regions_is_killed():
    from search.eval_worker import GpuEvaluator

    judge = object.__new__(GpuEvaluator)
    judge.kept_runner = None
    stuck = FakeRunner(unmap_ok=False)
    judge._keep_runner(stuck)
    assert judge.kept_runner is None and stuck.calls == ["unmap", "close"]
    judge.kept_runner = refused = FakeRunner(map_error="invalid handle")
    assert judge._kept_runner_for(["r0"], 7.0) is None and refused.calls[-1] == "close"


def test_batches_of_larger_problems_are_handed_out_first():
    """A round's largest problems go first, so the GPUs do not wait at its end for one that took them last; a
    problem's own requests keep their order."""
    from search.evaluator import batches, largest_first

    small, large = Problem("nt", "fp16", 64, 64, 64), Problem("nt", "fp16", 8192, 8192, 8192)
    requests = [(Candidate(config=f"k{i}"), p, "lib") for i, p in enumerate([small, small, large, large, small])]
    assert largest_first(batches(requests, 8), requests) == [[2, 3], [0, 1], [4]]
