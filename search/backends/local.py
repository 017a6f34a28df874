"""LocalBackend: the compile farm and one evaluation worker per GPU of this machine.

Builds land in an artifacts folder whose manifest also serves builds made elsewhere (`--compile-only` on a CPU
machine, the folder carried here): `evaluate` finds any build key the manifest records, compiled in this process
or not. `evaluate_iter` hands each verdict back as its worker answers, so the search stores it at once.
"""
from __future__ import annotations

import threading
from pathlib import Path
from typing import Any, Iterator

from search.backend import CompileOutcome, in_request_order
from search.candidate import COMPILE_ERROR, Candidate, EvalResult, Problem
from search.compile_farm import CompileFarm, artifact_paths, installed_kernels, nvcc_banner
from search.evaluator import EvaluatorPool


def nvcc_archs(arch: int) -> list[str]:
    """The nvcc targets of a run on compute capability `arch` (90 -> ["90a"]: the sm90 families need sm_90a)."""
    if arch == 90:
        return ["90a"]
    if arch // 10 in (8, 9):
        return [str(arch)]
    raise ValueError(f"unsupported arch sm{arch}; the kernel families target sm80..sm90")


class LocalBackend:
    """Compiles with `jobs` nvcc processes for compute capability `arch` (e.g. 90) into `artifacts` and evaluates
    on `gpus` (default: every visible GPU; workers start on the first evaluation), up to `batch` candidates of a
    problem per judge request. With `compile_only` it never
    starts a worker: `environment` reports the target arch only, and `evaluate` is refused. Configs the installed
    kernel library (cudal2_ops/libcudal2_kernels.so) already holds for these targets are not rebuilt."""

    def __init__(self, artifacts: Path, arch: int = 90, compile_only: bool = False, jobs: int | None = None,
                 gpus: list[str] | None = None, timeout_s: float = 300.0, cases: int = 3,
                 worker_env: dict[str, str] | None = None, batch: int = 8):
        self.arch, self.compile_only = arch, compile_only
        archs = nvcc_archs(arch)
        self.farm = CompileFarm(Path(artifacts), archs, jobs, prebuilt=installed_kernels(archs))
        self._gpus, self._timeout_s, self._cases, self._worker_env = gpus, timeout_s, cases, worker_env
        self._batch, self._baselines = batch, []
        self._pool: EvaluatorPool | None = None
        self._failed: dict[str, CompileOutcome] = {}
        self._rebuild: threading.Thread | None = None  # rebuild_missing's background builds, and their keys
        self._rebuilding: set[str] = set()

    @property
    def pool(self) -> EvaluatorPool:
        """The evaluation workers (created on first use, so that compile-only runs need no GPU)."""
        if self._pool is None:
            self._pool = EvaluatorPool(self._gpus, self._timeout_s, self._cases, self._worker_env, self._batch)
            self._pool.use_baselines(self._baselines)
        return self._pool

    def compile(self, candidates: list[Candidate]) -> dict[str, CompileOutcome]:
        """Builds each distinct build key (see CompileFarm.compile)."""
        return dict(self.compile_iter(candidates))

    def compile_iter(self, candidates: list[Candidate]) -> Iterator[tuple[str, CompileOutcome]]:
        """(build key, outcome) as each build finishes (see CompileFarm.compile_iter): the loop evaluates what is
        built while the rest compiles."""
        for key, outcome in self.farm.compile_iter(candidates):
            if not outcome.ok:
                self._failed[key] = outcome
            yield key, outcome

    def use_baselines(self, docs: list[dict]) -> None:
        """Baseline documents timed earlier (a store's), handed to the evaluator pool (search.baseline_cache)."""
        self._baselines += docs
        if self._pool is not None:
            self._pool.use_baselines(docs)

    def evaluate(self, requests: list[tuple[Candidate, Problem]]) -> list[EvalResult]:
        """Verdicts in request order (see `evaluate_iter`)."""
        return in_request_order(self.evaluate_iter(requests), len(requests))

    def evaluate_iter(self, requests: list[tuple[Candidate, Problem]]) -> Iterator[tuple[int, EvalResult]]:
        """(request index, verdict) as each is reached: first the candidates whose build failed, then each evaluated
        one as its worker answers. Requests whose builds rebuild_missing's background batch still holds wait for it
        (once) after every other request was evaluated, so the judge works while nvcc does. A build missing here (a
        run resumed on a fresh machine whose artifacts were lost) is rebuilt first; a candidate whose build fails
        gets the build's status (COMPILE_ERROR, or SCAN_REJECTED when the compile farm refused its source for a
        banned construct) with the build log's tail."""
        if self.compile_only:
            raise RuntimeError("this backend is compile-only (no GPU); evaluate with a backend made without it")
        if self._rebuild is not None:
            libraries = self.libraries()
            waiting = [i for i, (c, _) in enumerate(requests) if c.build_key in self._rebuilding
                       and c.build_key not in libraries]
            if waiting:
                held = set(waiting)
                now = [i for i in range(len(requests)) if i not in held]
                yield from ((now[j], v) for j, v in self._evaluate_built([requests[i] for i in now]))
                self._rebuild.join()  # the rest need rebuild_missing's batch: wait for it once
                self._rebuild = None
                yield from ((waiting[j], v) for j, v in self._evaluate_built([requests[i] for i in waiting]))
                return
        yield from self._evaluate_built(requests)

    def _evaluate_built(self, requests: list[tuple[Candidate, Problem]]) -> Iterator[tuple[int, EvalResult]]:
        """evaluate_iter for requests none of which waits for the background rebuild."""
        wanted = [c for c, _ in requests]
        libraries = self.libraries()
        missing = self._missing(wanted, libraries)
        if missing:  # built by an earlier call of a resumed run, on a machine whose artifacts are gone: rebuild
            self.compile(list(missing.values()))
            libraries = self.libraries()
        runnable = []
        for i, (cand, problem) in enumerate(requests):
            library = libraries.get(cand.build_key)
            if library is not None:
                runnable.append((i, (cand, problem, str(library.resolve()))))
                continue
            failed = self._failed.get(cand.build_key)
            yield i, (EvalResult(failed.status, reason=failed.log[-2000:], compile_s=failed.seconds) if failed else
                      EvalResult(COMPILE_ERROR, reason=f"{cand.build_key}: no library in {self.farm.artifacts} "
                                                       "after its build"))
        if runnable:
            for j, result in self.pool.evaluate_iter([r for _, r in runnable]):
                yield runnable[j][0], result

    def rebuild_missing(self, candidates: list[Candidate]) -> None:
        """Starts rebuilding, in a background thread, the builds of `candidates` (a store's earlier builds) whose
        libraries this machine lacks, all at once: a run resumed on a machine that starts bare then finds them built,
        or waits once for them, instead of rebuilding each chunk's before that chunk's first verdict."""
        missing = self._missing(candidates, self.libraries())
        if not missing:
            return
        self._rebuilding = set(missing)
        self._rebuild = threading.Thread(target=self.compile, args=(list(missing.values()),), name="search-rebuilds",
                                         daemon=True)
        self._rebuild.start()

    def build_missing(self, candidates: list[Candidate]) -> dict[str, CompileOutcome]:
        """Builds now, in parallel, the builds of `candidates` (a store's earlier builds) whose libraries this machine
        lacks; build key -> outcome of those built. `python -m search prebuild` runs it on the CPU machine ahead of a
        GPU call: a run resumed there with the artifacts folder (or the object cache they were compiled through)
        carried over finds them built (or only to be linked) instead of waiting for nvcc."""
        return self.compile(list(self._missing(candidates, self.libraries()).values()))

    def _missing(self, candidates: list[Candidate], libraries: dict[str, Path]) -> dict[str, Candidate]:
        """build_key -> candidate of each build of `candidates` with no library here and no failed build."""
        return {c.build_key: c for c in candidates if c.build_key not in libraries and c.build_key not in self._failed}

    def libraries(self) -> dict[str, Path]:
        """build_key -> shared library of every build this backend can evaluate now (prebuilt, or in the artifacts
        folder with its file present)."""
        found = {**self.farm.prebuilt, **artifact_paths(self.farm.artifacts)}
        return {key: path for key, path in found.items() if path.exists()}

    def prebuilt(self) -> set[str]:
        """Build keys that need no compile: the configs of the installed kernel library (evaluated from it)."""
        return set(self.farm.prebuilt)

    def environment(self) -> dict[str, Any]:
        """The evaluating GPU's environment, from the first worker (compile-only: the target arch and nvcc)."""
        if self.compile_only:
            return {"arch": self.arch, "compile_only": True, "nvcc": nvcc_banner(), "archs": self.farm.archs}
        return self.pool.environment()

    def close(self) -> None:
        """Stops the evaluation workers."""
        if self._pool is not None:
            self._pool.close()
