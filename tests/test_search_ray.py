"""RayBackend on one local Ray instance (2 CPUs): compiles as CPU tasks, evaluations over simulated-evaluator actors
with verdicts in request order, `python -m search run --backend ray --sim-workers N`, and fault tolerance: an actor
SIGKILLed or ray.kill-ed mid-request has that request re-queued, and the run's store equals an undisturbed run's."""
from __future__ import annotations

import dataclasses
import functools
import json
import os
import signal
import sqlite3
import sys
import threading
import time
from pathlib import Path

import pytest

from cudal2_catalog.codegen import default_configs
from search.candidate import CRASH, Candidate, Problem
from search.loop import RunArgs, Search
from search.simulate import SimulatedBackend
from search.store import Store
from search_abi_kernels import naive_source

ray = pytest.importorskip("ray", reason="the Ray backend's tests need the optional ray package (pip install '.[ray]'; "
                                        "CI installs it)")
from search import __main__ as cli  # noqa: E402
from search.backends.ray_backend import MAX_DEATHS, RayBackend  # noqa: E402 (after the skip: the module needs ray)

PROBLEMS = [Problem("nt", "fp16", 128, 4096, 4096), Problem("nt", "fp16", 4096, 4096, 4096)]
RUN_PROBLEMS = [Problem("nt", "fp16", m, n, k) for m, n, k in
                ((16, 4096, 4096), (128, 8192, 1024), (512, 1024, 4096), (2048, 2048, 2048), (4096, 14336, 4096),
                 (8192, 4096, 8192))]
RUN_ARGS = RunArgs(policy="rl", budget_evals=48, seed=3)
DELAY_S = 0.02


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False)
    ray.cloudpickle.register_pickle_by_value(sys.modules[__name__])  # the evaluators below, in the actors
    yield
    ray.shutdown()


def claim(marker: str, text: str = "") -> bool:
    """Creates `marker` holding `text` unless it exists (atomically): True for the one caller that created it."""
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.write(fd, text.encode())
    os.close(fd)
    return True


@dataclasses.dataclass
class SelfKillingEvaluator(SimulatedBackend):
    """The simulated evaluator, except that the first actor to receive its `after`-th request (one `marker` file
    for all actors) SIGKILLs its own process while holding that request; with `poison`, every actor that receives
    that candidate dies."""

    marker: str = ""
    after: int = 5
    poison: str = ""
    received: int = 0

    def evaluate(self, requests):
        self.received += len(requests)
        if any(c.id == self.poison for c, _ in requests) or (self.received >= self.after and claim(self.marker)):
            os.kill(os.getpid(), signal.SIGKILL)
        return super().evaluate(requests)


@dataclasses.dataclass
class StallingEvaluator(SimulatedBackend):
    """The simulated evaluator, except that the first actor to receive its `after`-th request writes its process id
    to `marker` and holds that request for `stall_s` (to be killed meanwhile)."""

    marker: str = ""
    after: int = 5
    stall_s: float = 60.0
    received: int = 0

    def evaluate(self, requests):
        self.received += len(requests)
        if self.received >= self.after and claim(self.marker, str(os.getpid())):
            time.sleep(self.stall_s)
        return super().evaluate(requests)


def slow_restart(evaluator: SelfKillingEvaluator, restart_s: float) -> SelfKillingEvaluator:
    """An actor's evaluator that takes `restart_s` to come back once one actor has died (calls sent to the actor
    meanwhile find it restarting)."""
    if os.path.exists(evaluator.marker):
        time.sleep(restart_s)
    return evaluator


class BrokenEvaluator:
    """An evaluator that cannot start (as on a node whose GPU is gone)."""

    def __init__(self):
        raise RuntimeError("no CUDA device in this actor")


def simulated_run(store_path: Path, backend) -> tuple[str, list[tuple]]:
    """One search run of RUN_PROBLEMS on `backend`: its id and its verdicts (candidate, problem, status, us, reward)."""
    store = Store(store_path)
    try:
        search = Search.start(store, backend, RUN_ARGS, RUN_PROBLEMS)
        search.run()
        verdicts = [(r["candidate_id"], r["problem_key"], r["status"], r["us"], r["reward"])
                    for r in store.evaluations(search.run_id)]
        assert store.run(search.run_id)["finished"] is not None
        return search.run_id, verdicts
    finally:
        store.close()


@pytest.fixture(scope="module")
def undisturbed(tmp_path_factory) -> list[tuple]:
    """The verdicts of the run on the single-process simulated backend (the reference for every Ray run)."""
    return simulated_run(tmp_path_factory.mktemp("reference") / "s.db",
                         SimulatedBackend(seed=RUN_ARGS.seed, eval_delay_s=DELAY_S))[1]


def assert_consistent(store_path: Path, verdicts: list[tuple], undisturbed: list[tuple]) -> None:
    """The run lost nothing and doubled nothing: the undisturbed run's verdicts, every problem evaluated, and a
    store that passes SQLite's integrity check."""
    assert verdicts == undisturbed
    assert len(verdicts) == RUN_ARGS.budget_evals
    assert {v[1] for v in verdicts} == {p.key for p in RUN_PROBLEMS}
    with sqlite3.connect(store_path) as db:
        assert db.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


def test_evaluations_over_actors_match_the_evaluator(local_ray):
    configs = [c for c in default_configs() if c.family == "sm90_tma_ws" and (c.dtype, c.layout) == ("fp16", "nt")]
    requests = [(Candidate(config=c.name), p) for c in configs[:5] for p in PROBLEMS]
    backend = RayBackend.simulated(2)
    try:
        results = backend.evaluate(requests)
        placements = backend.placements()
        assert len({p["pid"] for p in placements}) == 2
        environment = backend.environment()
        assert environment["gpu_name"] == SimulatedBackend().environment()["gpu_name"]
        assert environment["ray_workers"] == 2
        assert backend.prebuilt() == SimulatedBackend().prebuilt()
    finally:
        backend.close()
    expected = SimulatedBackend().evaluate(requests)
    assert [(r.status, r.us) for r in results] == [(e.status, e.us) for e in expected]
    assert not backend.faults


def test_compiles_run_as_tasks(local_ray, tmp_path, kernel_toolchain):
    good = Candidate(source=naive_source("ray_naive"), source_name="ray_naive")
    bad = Candidate(source=naive_source("ray_bad").replace("acc = 0.f", "acc = missing_name"), source_name="ray_bad")
    backend = RayBackend.on_gpus(tmp_path, arch=80, compile_only=True)
    outcomes = backend.compile([good, bad, good])
    assert outcomes[good.build_key].ok and not outcomes[bad.build_key].ok
    assert "missing_name" in outcomes[bad.build_key].log
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert set(manifest["builds"]) == {good.build_key, bad.build_key}
    assert backend.builds.unbuilt([good, bad]) == []  # built, or failed for good: nothing to rebuild
    (tmp_path / manifest["builds"][good.build_key]["artifact"]).unlink()
    assert backend.builds.unbuilt([good, bad]) == [good]  # a resumed run on a machine without the library
    assert backend.environment()["compile_only"]
    with pytest.raises(RuntimeError, match="compile-only"):
        backend.evaluate([(good, PROBLEMS[0])])


def test_cli_runs_simulated_workers(local_ray, tmp_path, undisturbed, capsys):
    store = tmp_path / "s.db"
    shapes = tmp_path / "shapes.txt"
    shapes.write_text("".join(f"{p.m} {p.n} {p.k}\n" for p in RUN_PROBLEMS))
    assert cli.main(["run", "--backend", "ray", "--sim-workers", "2", "--sim-delay-ms", str(DELAY_S * 1000),
                     "--shapes", str(shapes), "--budget-evals", str(RUN_ARGS.budget_evals), "--policy", "rl",
                     "--seed", str(RUN_ARGS.seed), "--max-builds", "1000", "--store", str(store), "--quiet"]) == 0
    db = Store(store)
    try:
        [run] = db.runs()
        assert json.loads(run["environment"])["ray_workers"] == 2
        verdicts = [(r["candidate_id"], r["problem_key"], r["status"], r["us"], r["reward"])
                    for r in db.evaluations(run["id"])]
    finally:
        db.close()
    assert_consistent(store, verdicts, undisturbed)
    assert cli.main(["run", "--backend", "sim", "--sim-workers", "2", "--budget-evals", "4", "--store",
                     str(tmp_path / "other.db")]) == 2
    assert "--sim-workers are options of --backend ray, not --backend sim" in capsys.readouterr().err


def test_sigkilled_actor_is_restarted_and_its_request_requeued(local_ray, tmp_path, undisturbed):
    marker = tmp_path / "killed"
    evaluator = SelfKillingEvaluator(seed=RUN_ARGS.seed, eval_delay_s=DELAY_S, marker=str(marker), after=10)
    backend = RayBackend(functools.partial(slow_restart, evaluator, 2.0),
                         RayBackend.simulated(2, seed=RUN_ARGS.seed).builds, workers=2, num_gpus=0, num_cpus=0)
    try:
        with pytest.warns(RuntimeWarning, match="evaluator actor died"):
            _, verdicts = simulated_run(tmp_path / "s.db", backend)
        assert len(backend.actors) == 2  # Ray restarted the killed one
    finally:
        backend.close()
    assert marker.exists() and len(backend.faults) == 1
    assert_consistent(tmp_path / "s.db", verdicts, undisturbed)


def test_ray_killed_actor_leaves_its_request_to_the_survivor(local_ray, tmp_path, undisturbed):
    marker = tmp_path / "stalled"
    evaluator = StallingEvaluator(seed=RUN_ARGS.seed, eval_delay_s=DELAY_S, marker=str(marker), after=10)
    backend = RayBackend(lambda: evaluator, RayBackend.simulated(2, seed=RUN_ARGS.seed).builds, workers=2,
                         num_gpus=0, num_cpus=0)
    by_pid = {p["pid"]: actor for p, actor in zip(backend.placements(), backend.actors)}

    def kill_the_stalled_actor() -> None:
        while not marker.exists() or not marker.read_text():
            time.sleep(0.01)
        ray.kill(by_pid[int(marker.read_text())])  # for good: no restart

    killer = threading.Thread(target=kill_the_stalled_actor, daemon=True)
    killer.start()
    try:
        began = time.monotonic()
        with pytest.warns(RuntimeWarning) as warned:
            _, verdicts = simulated_run(tmp_path / "s.db", backend)
        assert time.monotonic() - began < evaluator.stall_s / 2  # the survivor took the request, nobody waited
        assert len(backend.actors) == 1
    finally:
        backend.close()
    assert [str(w.message) for w in warned] == [f"search ray backend: {line}" for line in backend.faults]
    died, dropped = backend.faults
    assert died.startswith("evaluator actor died evaluating") and "killed by `ray.kill`" in died
    assert dropped.startswith("evaluator actor dropped (1 left)")
    assert_consistent(tmp_path / "s.db", verdicts, undisturbed)


def test_a_request_that_kills_every_actor_is_a_crash(local_ray, tmp_path):
    configs = [c for c in default_configs() if c.family == "sm90_tma_ws" and (c.dtype, c.layout) == ("fp16", "nt")]
    requests = [(Candidate(config=c.name), PROBLEMS[0]) for c in configs[:4]]
    evaluator = SelfKillingEvaluator(poison=requests[1][0].id, marker=str(tmp_path / "unused"), after=10**9)
    backend = RayBackend(lambda: evaluator, RayBackend.simulated(2).builds, workers=2, num_gpus=0, num_cpus=0)
    try:
        with pytest.warns(RuntimeWarning):
            results = backend.evaluate(requests)
        assert len(backend.actors) == 2
    finally:
        backend.close()
    assert results[1].status == CRASH and f"the evaluator actor died {MAX_DEATHS} times" in results[1].reason
    assert len(backend.faults) == MAX_DEATHS
    expected = SimulatedBackend().evaluate(requests)
    assert [(r.status, r.us) for i, r in enumerate(results) if i != 1] == \
        [(e.status, e.us) for i, e in enumerate(expected) if i != 1]


def test_no_live_actor_is_an_error_naming_the_cause(local_ray):
    backend = RayBackend(BrokenEvaluator, RayBackend.simulated(2).builds, workers=2, num_gpus=0, num_cpus=0)
    try:
        with pytest.warns(RuntimeWarning), pytest.raises(RuntimeError, match="every evaluator actor died.*no CUDA"):
            backend.evaluate([(Candidate(config=default_configs()[0].name), p) for p in PROBLEMS])
    finally:
        backend.close()


def test_scaling_study_runs_the_same_search_on_each_worker_count(local_ray, tmp_path):
    from studies import search_scaling
    shapes = tmp_path / "shapes.txt"
    shapes.write_text("".join(f"{p.m} {p.n} {p.k}\n" for p in RUN_PROBLEMS))
    out = tmp_path / "scaling.json"
    assert search_scaling.main(["--simulated", "--workers", "1,2", "--sim-delay-ms", "50", "--shapes", str(shapes),
                                "--budget-evals", "24", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert [r["workers"] for r in doc["runs"]] == [1, 2]
    assert all(r["evaluations"] == 24 and not r["faults"] for r in doc["runs"] + [doc["ceiling"]])
    assert len({r["verdicts_sha256"] for r in doc["runs"] + [doc["ceiling"]]}) == 1
    assert [len({p["pid"] for p in r["placements"]}) for r in doc["runs"]] == [1, 2]
    assert doc["runs"][1]["evals_per_min"] > doc["runs"][0]["evals_per_min"]
    assert "Simulated evaluators on" in out.with_suffix(".md").read_text()
