"""A resumed run on a machine that starts bare: the store's earlier builds are rebuilt at once in the background
(LocalBackend.rebuild_missing), not chunk by chunk before each chunk's first verdict (CPU: nvcc and the judge
stood in for)."""
from __future__ import annotations

import threading
import time

from search.backends.local import LocalBackend
from search.candidate import OK, Candidate, EvalResult, Problem
from search.loop import RunArgs, Search
from search.simulate import SimulatedBackend
from search.store import Store

BUILD_S = 0.3
PROBLEM = Problem("nt", "fp16", 128, 128, 128)
BUILDS = [Candidate(config=name) for name in ("sm80_cute_fp16_nt_64x64x64_s3_w4", "sm80_cute_fp16_nt_32x64x64_s3_w2",
                                              "tiny_fp16_nt_32x32x64_s6_w8")]


class JudgeStandIn:
    """The evaluator pool's interface: every request answered OK at once."""

    def use_baselines(self, docs):
        pass

    def evaluate_iter(self, requests):
        for index, _ in enumerate(requests):
            yield index, EvalResult(OK, us=10.0, baseline_us=11.0)


def stand_in_backend(tmp_path, monkeypatch) -> tuple[LocalBackend, list[str]]:
    """A LocalBackend whose nvcc takes BUILD_S per build (logged) and whose judge answers at once."""
    backend = LocalBackend(tmp_path / "artifacts", arch=90)
    backend.farm.prebuilt = {}
    built: list[str] = []
    lock = threading.Lock()

    def compile_stand_in(cand, library):
        time.sleep(BUILD_S)
        library.parent.mkdir(parents=True, exist_ok=True)
        library.write_bytes(b"so")
        with lock:
            built.append(cand.build_key)

    monkeypatch.setattr(backend.farm, "_compile", compile_stand_in)
    backend._pool = JudgeStandIn()
    return backend, built


def test_missing_builds_rebuild_in_the_background_and_an_evaluation_waits_for_them_once(tmp_path, monkeypatch):
    backend, built = stand_in_backend(tmp_path, monkeypatch)
    began = time.monotonic()
    backend.rebuild_missing(BUILDS)
    assert time.monotonic() - began < BUILD_S  # returns at once
    verdicts = dict(backend.evaluate_iter([(BUILDS[0], PROBLEM), (BUILDS[2], PROBLEM)]))
    assert {i: v.status for i, v in verdicts.items()} == {0: OK, 1: OK}
    assert sorted(built) == sorted(c.build_key for c in BUILDS)  # each built once: none again in the evaluation
    backend.rebuild_missing(BUILDS)  # all present now: nothing to do
    assert len(built) == len(BUILDS)


def test_what_is_built_is_judged_while_the_background_rebuild_runs(tmp_path, monkeypatch):
    """A request whose library exists gets its verdict before the rebuild ends; those that need the rebuild follow
    it, each build still built once."""
    backend, built = stand_in_backend(tmp_path, monkeypatch)
    ready = tmp_path / "ready.so"
    ready.write_bytes(b"so")
    backend.farm.prebuilt = {BUILDS[0].build_key: ready}
    backend.rebuild_missing(BUILDS)
    began = time.monotonic()
    verdicts = backend.evaluate_iter([(BUILDS[1], PROBLEM), (BUILDS[0], PROBLEM), (BUILDS[2], PROBLEM)])
    first_index, first = next(verdicts)
    assert (first_index, first.status) == (1, OK) and time.monotonic() - began < BUILD_S
    assert {i: v.status for i, v in verdicts} == {0: OK, 2: OK}
    assert sorted(built) == sorted(c.build_key for c in BUILDS[1:])


def test_without_the_background_rebuild_an_evaluation_builds_what_it_lacks(tmp_path, monkeypatch):
    backend, built = stand_in_backend(tmp_path, monkeypatch)
    assert dict(backend.evaluate_iter([(BUILDS[1], PROBLEM)]))[0].status == OK
    assert built == [BUILDS[1].build_key]


class RebuildLog(SimulatedBackend):
    """The simulator, logging what a search asks it to rebuild."""

    def __init__(self):
        super().__init__()
        self.asked: list[list[str]] = []

    def rebuild_missing(self, candidates):
        self.asked.append(sorted(c.build_key for c in candidates))


def test_a_search_hands_the_backend_every_build_the_store_compiled():
    store = Store(":memory:")
    first = Search.start(store, SimulatedBackend(), RunArgs(budget_evals=30), [PROBLEM, Problem("nt", "fp16", 64, 4096,
                                                                                                4096)])
    first.run()
    compiled = sorted(r[0] for r in store.query("SELECT build_key FROM compiles WHERE ok = 1 AND prebuilt = 0"))
    assert compiled  # the run compiled something of its own
    assert [c.build_key for c in store.compiled_candidates()] == compiled
    backend = RebuildLog()
    Search.resume(store, backend, first.run_id, {"budget_evals": 40})
    assert backend.asked == [compiled]


def test_prebuild_builds_the_stores_earlier_builds_once_on_a_machine_without_a_gpu(tmp_path, monkeypatch, capsys):
    """`python -m search prebuild`: every build the store's runs compiled lands in the artifacts folder (what a resume
    on a bare GPU machine would otherwise wait for), and a second call finds them there."""
    from search import __main__ as cli
    from search.backends import local
    from search.compile_farm import CompileFarm

    store_path = tmp_path / "s.sqlite"
    store = Store(store_path)
    run = Search.start(store, SimulatedBackend(), RunArgs(budget_evals=30), [PROBLEM, Problem("nt", "fp16", 64, 4096,
                                                                                              4096)])
    run.run()
    compiled = sorted(c.build_key for c in store.compiled_candidates())
    store.close()
    assert compiled
    built: list[str] = []

    def compile_stand_in(farm, cand, library):
        library.parent.mkdir(parents=True, exist_ok=True)
        library.write_bytes(b"so")
        built.append(cand.build_key)

    monkeypatch.setattr(local, "installed_kernels", lambda archs: {})
    monkeypatch.setattr(CompileFarm, "_compile", compile_stand_in)
    artifacts = tmp_path / "artifacts"
    assert cli.main(["prebuild", "--store", str(store_path), "--artifacts", str(artifacts)]) == 0
    assert sorted(built) == compiled
    assert f"{len(compiled)} built now" in capsys.readouterr().out
    assert cli.main(["prebuild", "--store", str(store_path), "--artifacts", str(artifacts)]) == 0
    assert sorted(built) == compiled and f"0 built now in 0 s, {len(compiled)} there already" in capsys.readouterr().out
