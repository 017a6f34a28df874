"""The compile farm: builds candidates into one shared library each, in parallel, without a GPU.

Config candidates are rendered with `cudal2_catalog.codegen.render` and compiled through `build_tools.kernel_lib`'s
content-hash object cache (same nvcc flags, ptxas C7510 fatal), so a rebuild is a link. Source candidates (C ABI
kernels written by the search) are untrusted: `search.source_build` scans them as written and as preprocessed,
checks every file they include, compiles them with a time limit and an output cap and checks the object before it
is linked; a refusal's outcome has status SCAN_REJECTED and its log starts with REFUSED. Each build lands as
`<artifacts>/<build_key>.so` with its compiler log `<build_key>.log` (truncated); `manifest.json` records build_key
-> library, ok, log, seconds, and the nvcc version and target archs, so that an artifacts folder built on a CPU
machine (`--compile-only`) can be carried to the GPU machine and evaluated there. Several searches may share one
artifacts folder (one process per GPU): the manifest is updated under an exclusive lock on `manifest.json.lock`.
"""
from __future__ import annotations

import concurrent.futures
import contextlib
import fcntl
import json
import os
import re
import threading
import time
from pathlib import Path
from typing import Iterator

from build_tools import kernel_lib
from cudal2_catalog import codegen
from cudal2_catalog.config import HgemmConfig
from search.backend import REFUSED, CompileOutcome
from search.candidate import COMPILE_ERROR, SCAN_REJECTED, Candidate
from search.source_build import COMPILE_TIMEOUT_S, LOG_CAP, REJECTED, build_source_object

MANIFEST = "manifest.json"
INSTALLED_LIBRARY = Path(kernel_lib.REPO_ROOT) / "cudal2_ops" / "libcudal2_kernels.so"
LOG_TAIL = 6000  # characters of compiler output kept in an outcome (the .log file keeps up to LOG_CAP)
SOURCE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,95}")


class SourceRefused(kernel_lib.KernelBuildError):
    """A search-written source refused for a banned construct: its build's status is SCAN_REJECTED."""


def source_arch_dir(source: str) -> str:
    """The kernel folder (nvcc targets) of a search-written source: sm90 (sm_90a) when it includes an sm90 header
    or uses WGMMA/TMA, else sm80 (sm_80 and sm_90)."""
    sm90_markers = ("cudal2/sm90_", "wgmma", "cp.async.bulk", "SM90_TMA")
    return "sm90" if any(marker in source for marker in sm90_markers) else "sm80"


def candidate_source(cand: Candidate) -> tuple[str, str, str]:
    """(arch_dir, kernel name, .cu text) of a candidate's build. Raises ValueError for an unknown or infeasible
    config, or a source candidate without `source_name`."""
    if cand.config:
        cfg = HgemmConfig.from_name(cand.config)
        return cfg.arch_dir, cfg.name, codegen.render(cfg)
    if not cand.source or not cand.source_name:
        raise ValueError("a candidate needs either `config` or both `source` and `source_name`")
    if not SOURCE_NAME.fullmatch(cand.source_name):
        raise ValueError(f"source_name {cand.source_name[:100]!r} is not a C identifier (letters, digits, _)")
    return source_arch_dir(cand.source), cand.source_name, cand.source


def nvcc_banner() -> str:
    """The release line of `nvcc --version` (e.g. "Cuda compilation tools, release 13.0, V13.0.88"), or why there
    is no nvcc."""
    problem = kernel_lib.toolchain_problem()
    if problem:
        return problem
    lines = kernel_lib.nvcc_version().strip().splitlines()
    return next((line for line in lines if "release" in line), lines[-1])


def installed_kernels(archs: list[str], library: Path = INSTALLED_LIBRARY) -> dict[str, Path]:
    """Kernel name -> `library` for every kernel of the installed kernel library when it holds code for all of
    `archs` (those configs need no build); empty when the library is missing or built for other targets."""
    if not library.exists():
        return {}
    from cudal2_testing.kernel_library import KernelLibrary  # noqa: PLC0415 (imports torch; only when there is one)
    loaded = KernelLibrary(library)
    if not set(archs) <= set(loaded.archs):
        return {}
    return {name: library.resolve() for name in loaded.kernels}


class CompileFarm:
    """Builds candidates under `artifacts` for `archs` (e.g. ["90a"]) with `jobs` parallel nvcc processes. Configs
    in `prebuilt` (kernel name -> a library already holding them, e.g. `installed_kernels(archs)`) are not built:
    their outcome points at that library."""

    def __init__(self, artifacts: Path, archs: list[str], jobs: int | None = None,
                 cache_dir: Path = kernel_lib.DEFAULT_CACHE_DIR, prebuilt: dict[str, Path] | None = None,
                 compile_timeout_s: float = COMPILE_TIMEOUT_S):
        self.artifacts = Path(artifacts)
        self.compile_timeout_s = compile_timeout_s
        self.archs = archs
        self.jobs = jobs or kernel_lib.default_jobs()
        self.cache_dir = cache_dir
        self.prebuilt = prebuilt or {}
        self._lock = threading.Lock()

    @property
    def manifest_path(self) -> Path:
        return self.artifacts / MANIFEST

    def manifest(self) -> dict:
        """The artifacts manifest: {"nvcc", "archs", "builds": {build_key: {...}}} (empty builds when new)."""
        if self.manifest_path.exists():
            return json.loads(self.manifest_path.read_text())
        return {"nvcc": "", "archs": self.archs, "builds": {}}

    def compile(self, candidates: list[Candidate]) -> dict[str, CompileOutcome]:
        """Builds each distinct build key of `candidates` (in parallel) and records it in the manifest."""
        return dict(self.compile_iter(candidates))

    def compile_iter(self, candidates: list[Candidate]) -> Iterator[tuple[str, CompileOutcome]]:
        """(build key, outcome) of each distinct build key of `candidates` as its build finishes (started in the
        order given), each recorded in the manifest first."""
        todo = {c.build_key: c for c in candidates}
        with concurrent.futures.ThreadPoolExecutor(max_workers=self.jobs) as pool:
            futures = {pool.submit(self.build, cand): key for key, cand in todo.items()}
            for future in concurrent.futures.as_completed(futures):
                key, outcome = futures[future], future.result()
                self.record({key: outcome})
                yield key, outcome

    def build(self, cand: Candidate) -> CompileOutcome:
        """Builds one candidate into `<artifacts>/<build_key>.so` (+ `.log`); does not touch the manifest."""
        start = time.monotonic()
        key = cand.build_key
        library, log_path = self.artifacts / f"{key}.so", self.artifacts / f"{key}.log"
        status = ""
        try:
            if cand.config in self.prebuilt:
                library = self.prebuilt[cand.config]
                ok, log = True, f"prebuilt: {cand.config} is in {library}"
            else:
                self._compile(cand, library)
                ok, log = True, f"built {cand.kernel_name} for {';'.join(self.archs)}"
        except (kernel_lib.KernelBuildError, ValueError) as exc:
            library.unlink(missing_ok=True)
            ok, log = False, str(exc)
            status = SCAN_REJECTED if isinstance(exc, SourceRefused) else COMPILE_ERROR
        log_path.parent.mkdir(parents=True, exist_ok=True)
        log_path.write_text(log[:LOG_CAP])
        return CompileOutcome(ok=ok, artifact=str(library) if ok else "", log=log[-LOG_TAIL:],
                              seconds=time.monotonic() - start, status=status)

    def _compile(self, cand: Candidate, library: Path) -> None:
        """Renders (configs) or writes (sources) the candidate's .cu under `src/<build_key>/`, compiles it (configs
        through the object cache, sources through `build_source_object`) and links it alone into `library`."""
        arch_dir, name, text = candidate_source(cand)
        source = self.artifacts / "src" / cand.build_key / arch_dir / f"{name}.cu"
        if not kernel_lib.gencode_flags(arch_dir, self.archs):
            raise kernel_lib.KernelBuildError(
                f"{name} ({arch_dir}) has no target among archs {self.archs}; sm90 kernels need 90a")
        codegen.write_if_changed(source, text)
        if cand.config:
            obj = kernel_lib.compile_object(source, self.archs, self.cache_dir)
        else:
            obj = source.with_suffix(".o")
            built = build_source_object(source.resolve(), arch_dir, self.archs, obj.resolve(), self.compile_timeout_s)
            if not built.ok:
                refused = built.status == REJECTED
                error = SourceRefused if refused else kernel_lib.KernelBuildError
                raise error((f"{REFUSED} (banned constructs): " if refused else "build failed: ") +
                            "; ".join(built.reasons) + ("\n" + built.log if built.log else ""))
        kernel_lib.link_library({name: obj}, library, self.archs)

    def record(self, outcomes: dict[str, CompileOutcome]) -> None:
        """Adds builds to the manifest (the one writer: builds may run elsewhere, e.g. as Ray tasks). Safe against
        the other threads of this farm and other processes sharing the folder: read, update and replace happen
        under the folder's manifest lock, through a temporary file of this process's own."""
        self.artifacts.mkdir(parents=True, exist_ok=True)
        with self._lock, _exclusive(self.artifacts / f"{MANIFEST}.lock"):
            doc = self.manifest()
            doc["nvcc"] = nvcc_banner()
            doc["archs"] = self.archs
            for key, out in outcomes.items():
                prebuilt = out.ok and Path(out.artifact).parent != self.artifacts
                artifact = out.artifact if prebuilt else Path(out.artifact).name if out.ok else ""
                doc["builds"][key] = {"artifact": artifact, "ok": out.ok,
                                      "log": f"{key}.log", "seconds": round(out.seconds, 2)}
            tmp = self.manifest_path.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps(doc, indent=1, sort_keys=True))
            tmp.replace(self.manifest_path)


@contextlib.contextmanager
def _exclusive(lock_path: Path) -> Iterator[None]:
    """Holds an exclusive advisory lock on `lock_path` (created if missing) for the block, across processes."""
    with open(lock_path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def artifact_paths(artifacts: Path) -> dict[str, Path]:
    """build_key -> shared library of every successful build in an artifacts folder (built ones are recorded
    relative to the folder, so a folder carried to another machine still resolves; prebuilt ones absolute)."""
    path = Path(artifacts) / MANIFEST
    if not path.exists():
        return {}
    builds = json.loads(path.read_text())["builds"]
    return {key: Path(artifacts) / b["artifact"] for key, b in builds.items() if b["ok"]}
