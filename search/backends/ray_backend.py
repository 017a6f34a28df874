"""RayBackend: compiles spread over CPU Ray tasks, evaluations over one-GPU Ray actors (optional extra `ray`).

Each actor holds an evaluator made by `evaluator_factory` (default: a LocalBackend on the actor's GPU, so crash and
hang isolation stay per GPU); requests are dealt round-robin to the actors and come back in order. Builds land in
one artifacts folder: on several hosts it must be a shared filesystem (every node reads the manifest). Only this
module imports ray, inside the backend.
"""
from __future__ import annotations

import functools
from pathlib import Path
from typing import Any, Callable

from search.backend import CompileOutcome
from search.backends.local import LocalBackend, nvcc_archs
from search.candidate import Candidate, EvalResult, Problem
from search.compile_farm import CompileFarm, installed_kernels, nvcc_banner


class EvaluatorActor:
    """Holds one evaluator (anything with `evaluate(requests)` and `environment()`) on one GPU."""

    def __init__(self, factory: Callable[[], Any]):
        self.evaluator = factory()

    def evaluate(self, requests: list[tuple[Candidate, Problem]]) -> list[EvalResult]:
        return self.evaluator.evaluate(requests)

    def prebuilt(self) -> set[str]:
        """Build keys that need no compile: the configs of the installed kernel library (evaluated from it)."""
        return set(self.farm.prebuilt)

    def environment(self) -> dict[str, Any]:
        return self.evaluator.environment()

    def close(self) -> None:
        close = getattr(self.evaluator, "close", None)
        if close:
            close()


def build_one(artifacts: str, archs: list[str], prebuilt: dict[str, Path], cand: Candidate) -> CompileOutcome:
    """One build on a Ray CPU worker (the compile farm's build, single job)."""
    return CompileFarm(Path(artifacts), archs, jobs=1, prebuilt=prebuilt).build(cand)


class RayBackend:
    """The backend protocol over a Ray cluster: `actors` evaluators of `num_gpus` GPUs each (default: one per GPU
    in the cluster) and one CPU task per build. `address` is passed to ray.init (None: a local instance, or the
    cluster RAY_ADDRESS names)."""

    def __init__(self, artifacts: Path, arch: int = 90, compile_only: bool = False,
                 evaluator_factory: Callable[[], Any] | None = None, actors: int | None = None,
                 num_gpus: float = 1, address: str | None = None, init_kwargs: dict | None = None):
        try:
            import ray  # noqa: PLC0415 (optional extra)
        except ImportError as exc:
            raise RuntimeError("the ray backend needs the ray package: pip install 'ray[default]'") from exc
        self.ray = ray
        if not ray.is_initialized():
            ray.init(address=address, **(init_kwargs or {}))
        archs = nvcc_archs(arch)
        self.farm = CompileFarm(Path(artifacts), archs, jobs=1, prebuilt=installed_kernels(archs))
        self.arch, self.compile_only = arch, compile_only
        self._build = ray.remote(num_cpus=1)(build_one)
        self._factory = evaluator_factory or functools.partial(LocalBackend, Path(artifacts).resolve(), arch)
        self._actor_count, self._num_gpus = actors, num_gpus
        self._actors: list | None = None

    @property
    def actors(self) -> list:
        """The evaluator actors (started on first use, so that compile-only runs need no GPU)."""
        if self._actors is None:
            count = self._actor_count or int(self.ray.cluster_resources().get("GPU", 0) // max(self._num_gpus, 1))
            if count < 1:
                raise RuntimeError("the Ray cluster has no GPU for an evaluator actor (pass actors= and num_gpus=0 "
                                   "for a CPU evaluator such as search.simulate.SimulatedBackend)")
            actor_class = self.ray.remote(num_gpus=self._num_gpus)(EvaluatorActor)
            self._actors = [actor_class.remote(self._factory) for _ in range(count)]
        return self._actors

    def compile(self, candidates: list[Candidate]) -> dict[str, CompileOutcome]:
        """One Ray task per distinct build key; the manifest is written here."""
        todo = {c.build_key: c for c in candidates}
        refs = {key: self._build.remote(str(self.farm.artifacts), self.farm.archs, self.farm.prebuilt, cand) for key, cand in todo.items()}
        outcomes = dict(zip(refs, self.ray.get(list(refs.values()))))
        self.farm.record(outcomes)
        return outcomes

    def evaluate(self, requests: list[tuple[Candidate, Problem]]) -> list[EvalResult]:
        """Requests dealt round-robin to the actors; verdicts in request order."""
        if self.compile_only:
            raise RuntimeError("this backend is compile-only (no GPU); evaluate with a backend made without it")
        actors = self.actors
        shares = [list(range(i, len(requests), len(actors))) for i in range(len(actors))]
        refs = [actor.evaluate.remote([requests[i] for i in share]) for actor, share in zip(actors, shares) if share]
        results: list[EvalResult | None] = [None] * len(requests)
        for share, verdicts in zip((s for s in shares if s), self.ray.get(refs)):
            for i, verdict in zip(share, verdicts):
                results[i] = verdict
        return results

    def environment(self) -> dict[str, Any]:
        """The first actor's GPU environment (compile-only: the target arch and nvcc targets)."""
        if self.compile_only:
            return {"arch": self.arch, "compile_only": True, "nvcc": nvcc_banner(), "archs": self.farm.archs}
        return self.ray.get(self.actors[0].environment.remote())

    def close(self) -> None:
        """Stops the actors (and their evaluators' workers)."""
        for actor in self._actors or []:
            self.ray.get(actor.close.remote())
            self.ray.kill(actor)
        self._actors = None
