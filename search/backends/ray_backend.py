"""RayBackend: the backend protocol over a Ray cluster (optional extra `ray`): builds as one-CPU Ray tasks,
evaluations over evaluator actors (one per GPU), each request handed to an idle actor and re-queued if its actor dies.

An actor holds a single-process evaluator: on a GPU a LocalBackend, whose evaluation worker runs on the GPU Ray
assigned to the actor (CUDA_VISIBLE_DEVICES), so crash and hang isolation stay per GPU; without GPUs the simulated
evaluator (tests, scaling studies). Builds land in one artifacts folder, on several hosts a shared filesystem; the
driver is the manifest's only writer.

Faults: Ray restarts an actor whose process dies (ACTOR_RESTARTS times: Ray's memory monitor, a kill, a lost node)
and retries a build task whose worker died. The request a dead actor held goes back to the front of the queue, for
the restarted actor or a survivor; verdicts already returned are kept. The actor gets work again once a probe shows
it restarted; one killed for good (`ray.kill`, out of restarts) is dropped and the others go on. A request under
which actors died MAX_DEATHS times gets a CRASH verdict, so that one candidate cannot take every actor down.
Only this module and search.ray_cluster import ray, inside functions.
"""
from __future__ import annotations

import collections
import dataclasses
import functools
import os
import warnings
from pathlib import Path
from typing import Any, Callable, Iterator

from search.backend import CompileOutcome
from search.backends.local import LocalBackend, nvcc_archs
from search.candidate import CRASH, Candidate, EvalResult, Problem
from search.compile_farm import CompileFarm, artifact_paths, installed_kernels, nvcc_banner
from search.simulate import SimulatedBackend

ACTOR_RESTARTS = 5   # restarts Ray gives an actor whose process died (memory pressure, a kill, a lost node)
MAX_DEATHS = 3       # actor deaths under one request before it is a CRASH (a candidate's own crash is caught in the
                     # evaluation worker below the actor: actor deaths come from outside, so a request gets a few)


def summary(exc: BaseException) -> str:
    """One line of a Ray error: its first line, and its last (the cause, e.g. the evaluator's exception)."""
    lines = [line.strip() for line in str(exc).splitlines() if line.strip()] or [type(exc).__name__]
    return lines[0] if len(lines) == 1 else f"{lines[0]} ... {lines[-1]}"


class EvaluatorActor:
    """A Ray actor holding one evaluator (anything with `evaluate`, `environment` and `close`)."""

    def __init__(self, factory: Callable[[], Any]):
        self.evaluator = factory()

    def evaluate(self, requests: list[tuple[Candidate, Problem]]) -> list[EvalResult]:
        return self.evaluator.evaluate(requests)

    def environment(self) -> dict[str, Any]:
        return self.evaluator.environment()

    def placement(self) -> dict[str, Any]:
        """Where this actor runs: process id, Ray node, the GPU ids Ray gave it and CUDA_VISIBLE_DEVICES."""
        import ray  # noqa: PLC0415 (inside a Ray worker)
        return {"pid": os.getpid(), "node": ray.get_runtime_context().get_node_id(),
                "gpu_ids": [str(g) for g in ray.get_gpu_ids()],
                "cuda_visible_devices": os.environ.get("CUDA_VISIBLE_DEVICES", "")}

    def close(self) -> None:
        self.evaluator.close()


def nvcc_build(artifacts: str, archs: list[str], prebuilt: dict[str, Path], cand: Candidate) -> CompileOutcome:
    """One nvcc build on a Ray CPU worker (the compile farm's build; the driver records it in the manifest)."""
    return CompileFarm(Path(artifacts), archs, jobs=1, prebuilt=prebuilt).build(cand)


def simulated_build(seed: int, arch: int, cand: Candidate) -> CompileOutcome:
    """One simulated build on a Ray CPU worker."""
    return SimulatedBackend(seed=seed, arch=arch).compile([cand])[cand.build_key]


def build_task(build: Callable[[Candidate], CompileOutcome], cand: Candidate) -> CompileOutcome:
    """The Ray task of one build (`build`: NvccBuilds.task or SimulatedBuilds.task)."""
    return build(cand)


class NvccBuilds:
    """Real builds for compute capability `arch` into `artifacts`: configs the installed kernel library holds are
    prebuilt; the manifest is written here, by the driver."""

    def __init__(self, artifacts: Path, arch: int):
        archs = nvcc_archs(arch)
        self.arch = arch
        self.farm = CompileFarm(Path(artifacts).resolve(), archs, jobs=1, prebuilt=installed_kernels(archs))
        self.task = functools.partial(nvcc_build, str(self.farm.artifacts), archs, self.farm.prebuilt)

    def prebuilt(self) -> set[str]:
        return set(self.farm.prebuilt)

    def record(self, outcomes: dict[str, CompileOutcome]) -> None:
        self.farm.record(outcomes)

    def unbuilt(self, candidates: list[Candidate]) -> list[Candidate]:
        """Candidates whose build has neither a library here nor a failed build in the manifest (a resumed run's
        builds on a machine that lacks them): to build before they are evaluated."""
        builds = self.farm.manifest()["builds"]
        present = {key for key, path in {**self.farm.prebuilt, **artifact_paths(self.farm.artifacts)}.items()
                   if path.exists()}
        todo = {c.build_key: c for c in candidates
                if c.build_key not in present and builds.get(c.build_key, {}).get("ok", True)}
        return list(todo.values())

    def environment(self) -> dict[str, Any]:
        return {"arch": self.arch, "compile_only": True, "nvcc": nvcc_banner(), "archs": self.farm.archs}


@dataclasses.dataclass(frozen=True)
class SimulatedBuilds:
    """The simulator's builds (search/simulate.py): nothing is written, the simulated evaluator derives every build
    again."""

    seed: int = 0
    arch: int = 90

    @property
    def task(self) -> Callable[[Candidate], CompileOutcome]:
        return functools.partial(simulated_build, self.seed, self.arch)

    def prebuilt(self) -> set[str]:
        return SimulatedBackend(seed=self.seed, arch=self.arch).prebuilt()

    def record(self, outcomes: dict[str, CompileOutcome]) -> None:
        """Nothing to record: simulated builds leave no files."""

    def unbuilt(self, candidates: list[Candidate]) -> list[Candidate]:
        return []

    def environment(self) -> dict[str, Any]:
        return {"arch": self.arch, "compile_only": True, "simulated": True}


class RayBackend:
    """The backend protocol on the Ray cluster this process is connected to (see search.ray_cluster.connect):
    `workers` actors holding `evaluator()` with `num_gpus` GPUs and `num_cpus` CPUs each (default: one actor per
    GPU of the cluster), builds by `builds` (NvccBuilds or SimulatedBuilds) as one-CPU tasks. Make one with
    `on_gpus` or `simulated`. With `disconnect`, `close` also disconnects from Ray (stopping a local cluster this
    process started). `faults` lists the actor deaths seen, one line each."""

    def __init__(self, evaluator: Callable[[], Any], builds: NvccBuilds | SimulatedBuilds, *,
                 workers: int | None = None, num_gpus: float = 1, num_cpus: float = 1, compile_only: bool = False,
                 disconnect: bool = False):
        import ray  # noqa: PLC0415 (optional extra)
        if not ray.is_initialized():
            raise RuntimeError("RayBackend needs a Ray connection first: search.ray_cluster.connect(address)")
        self.ray = ray
        self.evaluator, self.builds, self.compile_only, self.disconnect = evaluator, builds, compile_only, disconnect
        self._build = ray.remote(num_cpus=1)(build_task)
        self._workers, self._options = workers, {"num_gpus": num_gpus, "num_cpus": num_cpus,
                                                 "max_restarts": ACTOR_RESTARTS, "max_task_retries": 0}
        self._actors: list | None = None
        self.faults: list[str] = []

    @classmethod
    def on_gpus(cls, artifacts: Path, arch: int = 90, workers: int | None = None, **options) -> "RayBackend":
        """One LocalBackend actor per GPU (one GPU and one CPU each; `workers` of them, default every GPU of the
        cluster) and nvcc builds into `artifacts`; `options`: compile_only, disconnect."""
        evaluator = functools.partial(LocalBackend, Path(artifacts).resolve(), arch)
        return cls(evaluator, NvccBuilds(artifacts, arch), workers=workers, **options)

    @classmethod
    def simulated(cls, workers: int, seed: int = 0, eval_delay_s: float = 0.0, arch: int = 90,
                  **options) -> "RayBackend":
        """`workers` actors holding the simulated evaluator (no GPU and no CPU reserved: a simulated evaluation
        sleeps `eval_delay_s`, as if a GPU did the work) and simulated builds; `options`: compile_only, disconnect."""
        evaluator = functools.partial(SimulatedBackend, seed=seed, eval_delay_s=eval_delay_s, arch=arch)
        return cls(evaluator, SimulatedBuilds(seed, arch), workers=workers, num_gpus=0, num_cpus=0, **options)

    @property
    def actors(self) -> list:
        """The live evaluator actors (started on first use, so that compile-only runs need no GPU)."""
        if self._actors is None:
            count = self._workers
            if count is None:
                count = int(self.ray.cluster_resources().get("GPU", 0) // max(self._options["num_gpus"], 1))
            if count < 1:
                raise RuntimeError("the Ray cluster has no GPU for an evaluator actor; on a machine without one, "
                                   "use simulated workers (python -m search run --backend ray --sim-workers N)")
            actor_class = self.ray.remote(**self._options)(EvaluatorActor)
            self._actors = [actor_class.remote(self.evaluator) for _ in range(count)]
        return self._actors

    def compile(self, candidates: list[Candidate]) -> dict[str, CompileOutcome]:
        """One Ray task per distinct build key; the outcomes recorded by the driver."""
        todo = {c.build_key: c for c in candidates}
        task = self.ray.put(self.builds.task)
        refs = {key: self._build.remote(task, cand) for key, cand in todo.items()}
        outcomes = dict(zip(refs, self.ray.get(list(refs.values()))))
        self.builds.record(outcomes)
        return outcomes

    def evaluate(self, requests: list[tuple[Candidate, Problem]]) -> list[EvalResult]:
        """Verdicts in request order (see `evaluate_iter`)."""
        results: list[EvalResult | None] = [None] * len(requests)
        for i, result in self.evaluate_iter(requests):
            results[i] = result
        return results

    def evaluate_iter(self, requests: list[tuple[Candidate, Problem]]) -> Iterator[tuple[int, EvalResult]]:
        """(request index, verdict) in request order, each as soon as it and every earlier one are in: the loop
        stores and learns in the same order whatever the number of actors or the faults, so a run's store does not
        depend on them. Builds missing here are built first (a resumed run)."""
        if self.compile_only:
            raise RuntimeError("this backend is compile-only (no GPU); evaluate with a backend made without it")
        if missing := self.builds.unbuilt([c for c, _ in requests]):
            self.compile(missing)
        arrived: dict[int, EvalResult] = {}
        upcoming = 0
        for i, result in self._as_finished(requests):
            arrived[i] = result
            while upcoming in arrived:
                yield upcoming, arrived.pop(upcoming)
                upcoming += 1

    def _as_finished(self, requests: list[tuple[Candidate, Problem]]) -> Iterator[tuple[int, EvalResult]]:
        """(request index, verdict) as actors finish them: each request goes to an idle actor; one whose actor died
        goes back to the front of the queue, and the actor is probed (back once Ray restarted it, else dropped)."""
        queue, deaths = collections.deque(range(len(requests))), collections.Counter()
        idle, busy, probing = list(self.actors), {}, {}  # busy: ref -> (actor, request); probing: ref -> actor
        while queue or busy:
            while queue and idle:
                actor, i = idle.pop(), queue.popleft()
                busy[actor.evaluate.remote([requests[i]])] = (actor, i)
            if not busy and not probing:
                raise RuntimeError(f"every evaluator actor died; {len(queue)} requests left. Faults: "
                                   + " | ".join(self.faults[-3:]))
            [ref], _ = self.ray.wait(list(busy) + list(probing), num_returns=1)
            if ref in probing:
                self._probed(probing.pop(ref), ref, idle)
                continue
            actor, i = busy.pop(ref)
            try:
                [result] = self.ray.get(ref)
            except self.ray.exceptions.RayActorError as exc:
                deaths[i] += 1
                cand, problem = requests[i]
                self._fault(f"evaluator actor died evaluating {cand.id} on {problem.key} "
                            f"(death {deaths[i]} of {MAX_DEATHS}): {summary(exc)}")
                probing[actor.placement.options(max_task_retries=-1).remote()] = actor  # waits out a restart
                if deaths[i] < MAX_DEATHS:
                    queue.appendleft(i)
                    continue
                result = EvalResult(CRASH, reason=f"the evaluator actor died {MAX_DEATHS} times evaluating it: "
                                                  f"{summary(exc)}")
            else:
                idle.append(actor)
            yield i, result
        for ref, actor in probing.items():
            self._probed(actor, ref, idle)

    def _probed(self, actor, ref, idle: list) -> None:
        """A dead actor's probe came back: the actor is back (restarted) or gone for good (dropped: killed with
        ray.kill, out of restarts, or its node lost)."""
        try:
            self.ray.get(ref)
            idle.append(actor)
        except self.ray.exceptions.RayActorError as exc:
            self._actors.remove(actor)
            self._fault(f"evaluator actor dropped ({len(self._actors)} left): {summary(exc)}")

    def _fault(self, line: str) -> None:
        self.faults.append(line)
        warnings.warn(f"search ray backend: {line}", RuntimeWarning, stacklevel=3)

    def prebuilt(self) -> set[str]:
        """Build keys that need no compile (the installed kernel library's configs, or the simulator's defaults)."""
        return self.builds.prebuilt()

    def placements(self) -> list[dict[str, Any]]:
        """Where each live actor runs (pid, node, GPU ids, CUDA_VISIBLE_DEVICES)."""
        return self.ray.get([actor.placement.remote() for actor in self.actors])

    def environment(self) -> dict[str, Any]:
        """An actor's evaluator environment plus `ray_workers` (compile-only: the builds' target)."""
        if self.compile_only:
            return self.builds.environment()
        return {**self.ray.get(self.actors[0].environment.remote()), "ray_workers": len(self.actors)}

    def close(self) -> None:
        """Stops the actors (and their evaluators' workers); with `disconnect`, disconnects from Ray."""
        for actor in self._actors or []:
            try:
                self.ray.get(actor.close.remote())
            except self.ray.exceptions.RayActorError:
                pass  # already dead: nothing to close
            self.ray.kill(actor)
        self._actors = None
        if self.disconnect:
            self.ray.shutdown()
