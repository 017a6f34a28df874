"""Builds the torch-free kernel library `libcudal2_kernels.so` from generated `kernels/<arch_dir>/<name>.cu` files.

Used by `setup.py` (the kernels named by the tables plus the default set) and by the search's compile farm
(candidate kernels). Objects are cached by a content hash of source, headers, flags and compiler, so a rebuild
compiles only what changed and objects built on one machine (e.g. a CPU-only developer box with nvcc) can be
carried to another.

    python -m build_tools.kernel_lib --out cudal2_ops/libcudal2_kernels.so [--names NAME ...] [--archs 9.0a]
    python -m build_tools.kernel_lib --estimate     # what a build would compile here, and how long it would take
"""
from __future__ import annotations

import argparse
import concurrent.futures
import fnmatch
import functools
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from build_tools import build_estimate

REPO_ROOT = Path(__file__).resolve().parent.parent
KERNELS_DIR = REPO_ROOT / "kernels"
INCLUDE_DIR = REPO_ROOT / "csrc" / "include"
DEFAULT_SET_FILE = KERNELS_DIR / "default_set.txt"
DEFAULT_CACHE_DIR = REPO_ROOT / "build" / "kernel_cache"
DEFAULT_ARCHS = "8.0;9.0a"
CUTLASS_PIN = "4.2.0.0"

# ptxas warnings that mean a slow kernel (wgmma serialised across a function boundary): treated as build errors.
FATAL_PTXAS_WARNINGS = ("C7510",)


class KernelBuildError(RuntimeError):
    """A kernel failed to compile or link; the message holds the compiler output."""


def nvcc_path() -> str:
    """The nvcc to use: $CUDA_HOME/bin/nvcc if set, else the one on PATH."""
    cuda_home = os.environ.get("CUDA_HOME") or os.environ.get("CUDA_PATH")
    if cuda_home and (Path(cuda_home) / "bin" / "nvcc").exists():
        return str(Path(cuda_home) / "bin" / "nvcc")
    found = shutil.which("nvcc")
    if not found:
        raise KernelBuildError("nvcc not found: set CUDA_HOME or put nvcc on PATH")
    return found


@functools.lru_cache(maxsize=None)
def nvcc_version() -> str:
    """nvcc's version banner (part of every object's cache key)."""
    return subprocess.run([nvcc_path(), "--version"], capture_output=True, text=True, check=True).stdout


def cutlass_include_dir() -> Path:
    """CUTLASS/CuTe headers: $CUTLASS_DIR/include if set, else those of the PyPI package nvidia-cutlass."""
    if os.environ.get("CUTLASS_DIR"):
        return Path(os.environ["CUTLASS_DIR"]) / "include"
    try:
        import cutlass_library  # noqa: PLC0415 (optional dependency, only needed to build)
    except ImportError as exc:
        raise KernelBuildError(
            f"CUTLASS headers not found: pip install nvidia-cutlass=={CUTLASS_PIN} (or set CUTLASS_DIR)") from exc
    return Path(cutlass_library.__file__).resolve().parent / "source" / "include"


def toolchain_problem() -> str | None:
    """Why kernels cannot be built here (nvcc or the CUTLASS headers missing), or None when they can."""
    try:
        nvcc_path()
        cutlass_include_dir()
    except KernelBuildError as exc:
        return str(exc)
    return None


def parse_arch_list(text: str | None) -> list[str]:
    """Normalises a TORCH_CUDA_ARCH_LIST-style string ("8.0;9.0a", "8.0 9.0+PTX") to ["80", "90a"]."""
    text = text or DEFAULT_ARCHS
    archs = []
    for item in re.split(r"[;\s,]+", text.strip()):
        if not item:
            continue
        item = item.replace("+PTX", "")
        if not re.fullmatch(r"\d+\.\d+a?", item):
            raise ValueError(f"bad CUDA arch {item!r} in {text!r}; expected entries like 8.0 or 9.0a")
        archs.append(item.replace(".", ""))
    return sorted(set(archs))


def gencode_flags(arch_dir: str, archs: list[str]) -> list[str]:
    """nvcc -gencode flags for the kernels of `arch_dir` under the requested archs (empty: not built at all).

    sm90 kernels need the arch-specific target sm_90a (TMA, WGMMA). sm80 kernels are built for sm_80 when any
    8.x target is requested and for sm_90 when any 9.x target is.
    """
    majors = {a[0] for a in archs}
    if arch_dir == "sm90":
        return ["-gencode=arch=compute_90a,code=sm_90a"] if "9" in majors else []
    if arch_dir == "sm80":
        flags = []
        if "8" in majors:
            flags.append("-gencode=arch=compute_80,code=sm_80")
        if "9" in majors:
            flags.append("-gencode=arch=compute_90,code=sm_90")
        return flags
    raise ValueError(f"unknown kernel folder {arch_dir!r}")


def library_archs(archs: list[str]) -> str:
    """The targets a library built for `archs` holds code for, as recorded in the library ("80;90;90a")."""
    built = set()
    for arch_dir in ("sm80", "sm90"):
        for flag in gencode_flags(arch_dir, archs):
            built.add(flag.rsplit("sm_", 1)[1])
    return ";".join(sorted(built))


def common_flags() -> list[str]:
    """Flags every kernel translation unit is compiled with."""
    return ["-std=c++17", "-O3", "-DNDEBUG", "--expt-relaxed-constexpr", "-Xcompiler=-fPIC",
            "-Xcompiler=-Wno-deprecated-declarations", "-I" + str(INCLUDE_DIR), "-I" + str(cutlass_include_dir()),
            "-DCUTLASS_ENABLE_TENSOR_CORE_MMA=1", "--use_fast_math"]


INCLUDE_LINE = re.compile(r'^\s*#\s*include\s*["<](cudal2/[^">]+)[">]', re.MULTILINE)


def repo_includes(path: Path) -> tuple[Path, ...]:
    """The repository headers (`cudal2/...` under INCLUDE_DIR) that the file at `path` names in an #include line,
    whether or not a preprocessor condition would skip it (so the set can only be too large, never too small)."""
    found = (INCLUDE_DIR / name for name in INCLUDE_LINE.findall(path.read_text(errors="replace")))
    return tuple(sorted(p for p in found if p.is_file()))


def included_headers(source: Path) -> list[Path]:
    """Every repository header `source` includes, directly or through other repository headers."""
    seen: set[Path] = set()
    todo = list(repo_includes(source))
    while todo:
        header = todo.pop()
        if header not in seen:
            seen.add(header)
            todo.extend(repo_includes(header))
    return sorted(seen)


def headers_digest(source: Path) -> str:
    """Hash of the repository headers `source` includes (names and contents): editing a header changes the key of
    exactly the kernels that include it, and adding one changes none."""
    h = hashlib.sha256()
    for path in included_headers(source):
        h.update(path.relative_to(INCLUDE_DIR).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()


def code_digest(source: Path) -> str:
    """Hash of what a kernel's code is (its generated source and the repository headers it includes), whatever the
    flags and compiler: what a sanitizer record names, so that editing a header makes the record stale."""
    h = hashlib.sha256(source.read_bytes())
    h.update(headers_digest(source).encode())
    return h.hexdigest()[:24]


def object_key(source: Path, flags: list[str]) -> str:
    """Content hash of one compile: source, repository headers, CUTLASS version, flags, compiler.

    Include paths are left out (they differ between machines; what they point to is hashed or pinned), so objects
    built on one machine are reused on another.
    """
    h = hashlib.sha256()
    portable_flags = [f for f in flags if not f.startswith("-I")]
    cutlass = os.environ.get("CUTLASS_DIR", CUTLASS_PIN)
    for part in (source.read_bytes(), headers_digest(source).encode(), cutlass.encode(),
                 " ".join(portable_flags).encode(), nvcc_version().encode()):
        h.update(part)
        h.update(b"\0")
    return h.hexdigest()[:24]


def find_source(name: str) -> Path:
    """The generated source of kernel `name` (searched in every kernels/<arch_dir>/)."""
    hits = sorted(KERNELS_DIR.glob(f"*/{name}.cu"))
    if not hits:
        raise KernelBuildError(f"no source for kernel {name!r} under {KERNELS_DIR}/*/ (run python -m cudal2_catalog.codegen)")
    return hits[0]


def table_kernel_names() -> set[str]:
    """Kernel names referenced by the committed tables `kernels/<arch_dir>/*.json` (entries that name a cuBLASLt
    configuration instead name no kernel)."""
    names: set[str] = set()
    for path in KERNELS_DIR.glob("*/*.json"):
        table = json.loads(path.read_text())
        names.update(entry["kernel"] for entry in table.get("entries", {}).values() if entry.get("kernel"))
    return names


def default_kernel_names() -> set[str]:
    """Names in `kernels/default_set.txt` (the always-built set)."""
    if not DEFAULT_SET_FILE.exists():
        return set()
    return {line.strip() for line in DEFAULT_SET_FILE.read_text().splitlines() if line.strip()}


def select_kernel_names(patterns: str | None = None) -> list[str]:
    """Tables' kernels plus the default set, filtered by `patterns` (CUDAL2_KERNELS: comma-separated wildcards)."""
    names = table_kernel_names() | default_kernel_names()
    if patterns:
        wanted = [p.strip() for p in patterns.split(",") if p.strip()]
        names = {n for n in names if any(fnmatch.fnmatchcase(n, p) for p in wanted)}
    return sorted(names)


def default_jobs() -> int:
    """MAX_JOBS if set, else one job per core capped by memory (about 4 GiB per CUTLASS translation unit)."""
    if os.environ.get("MAX_JOBS"):
        return max(1, int(os.environ["MAX_JOBS"]))
    cores = os.cpu_count() or 1
    try:
        mem_kib = next(int(line.split()[1]) for line in open("/proc/meminfo") if line.startswith("MemAvailable"))
        by_mem = max(1, mem_kib // (4 * 1024 * 1024))
    except (OSError, StopIteration, ValueError):
        by_mem = cores
    return max(1, min(cores, by_mem))


def object_path(source: Path, archs: list[str], cache_dir: Path) -> Path | None:
    """Where the cached object of `source` built for `archs` lives; None when no requested arch applies to it."""
    arch_flags = gencode_flags(source.parent.name, archs)
    if not arch_flags:
        return None
    return cache_dir / f"{source.stem}-{object_key(source, common_flags() + arch_flags)}.o"


def compile_object(source: Path, archs: list[str], cache_dir: Path) -> Path | None:
    """Compiles one kernel source into a cached object; None when no requested arch applies to it."""
    obj = object_path(source, archs, cache_dir)
    if obj is None or obj.exists():
        return obj
    flags = common_flags() + gencode_flags(source.parent.name, archs)
    cache_dir.mkdir(parents=True, exist_ok=True)
    tmp = obj.with_suffix(f".{os.getpid()}.tmp.o")
    proc = subprocess.run([nvcc_path(), *flags, "-c", str(source), "-o", str(tmp)], capture_output=True, text=True)
    log = proc.stdout + proc.stderr
    fatal = [w for w in FATAL_PTXAS_WARNINGS if w in log]
    if proc.returncode != 0 or fatal:
        tmp.unlink(missing_ok=True)
        why = f"ptxas warning {fatal} (treated as an error)" if fatal else f"nvcc exit {proc.returncode}"
        raise KernelBuildError(f"compiling {source.name} failed: {why}\n{log[-6000:]}")
    tmp.replace(obj)
    return obj


def registry_source(names: list[str], archs: str) -> str:
    """C++ source of the library's index: `cudal2_kernel_library` and `cudal2_kernel_library_archs`."""
    decls = "".join(f'extern "C" const cudal2_kernel* cudal2_kernel_{n}(void);\n' for n in names)
    calls = "".join(f"      cudal2_kernel_{n}(),\n" for n in names)
    return (
        "// Generated by build_tools/kernel_lib.py. Do not edit.\n"
        '#include "cudal2/abi.h"\n'
        f"{decls}"
        'extern "C" const cudal2_kernel* const* cudal2_kernel_library(int* count) {\n'
        f"  static const cudal2_kernel* const kernels[] = {{\n{calls}      nullptr}};\n"
        f"  *count = {len(names)};\n"
        "  return kernels;\n"
        "}\n"
        f'extern "C" const char* cudal2_kernel_library_archs(void) {{ return "{archs}"; }}\n'
    )


def print_progress(line: str) -> None:
    """Default progress sink: stderr, flushed, so each line shows up at once in a log (piped stdout is buffered)."""
    print(line, file=sys.stderr, flush=True)


def format_seconds(seconds: float) -> str:
    """Seconds as text: 75 -> "1m15s", 9 -> "9s"."""
    minutes, secs = divmod(int(round(seconds)), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{secs}s"


def link_library(objects: dict[str, Path], out: Path, archs: list[str]) -> list[str]:
    """Links compiled kernel objects (kernel name -> object) with the library index into the shared library `out`;
    returns the names linked in. Raises KernelBuildError with the linker output on failure."""
    linked = sorted(objects)
    out.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory() as tmpdir:
        reg = Path(tmpdir) / "kernel_registry.cu"
        reg.write_text(registry_source(linked, library_archs(archs)))
        tmp_out = Path(tmpdir) / out.name
        cmd = [nvcc_path(), "-shared", "-std=c++17", "-O2", "-Xcompiler=-fPIC", "-I" + str(INCLUDE_DIR),
               "-cudart", "static", "-o", str(tmp_out), str(reg), *(str(objects[n]) for n in linked)]
        proc = subprocess.run(cmd, capture_output=True, text=True)
        if proc.returncode != 0:
            raise KernelBuildError(f"linking {out.name} failed:\n{(proc.stdout + proc.stderr)[-6000:]}")
        shutil.copyfile(tmp_out, out)
    return linked


def expected_seconds(sources: list[Path], archs: list[str], cache_dir: Path) -> dict[str, float]:
    """Expected compile seconds of each kernel source (by name) for `archs`: its family's measured time per target
    (build_tools/build_estimate.py), 0 for a cached object or a kernel with no requested target."""
    expected = {}
    for src in sources:
        obj = object_path(src, archs, cache_dir)
        targets = len(gencode_flags(src.parent.name, archs))
        expected[src.stem] = build_estimate.kernel_seconds(src.stem, targets, cached=obj is None or obj.exists())
    return expected


def plan_summary(expected: dict[str, float], archs: list[str], jobs: int) -> str:
    """One line: how many kernels a build compiles, how many are cached, and how long it should take."""
    to_compile = sum(1 for seconds in expected.values() if seconds > 0)
    total = build_estimate.parallel_seconds(list(expected.values()), jobs)
    rest = "" if to_compile == len(expected) else " (the rest cached or not built for these targets)"
    return (f"{len(expected)} kernels for {';'.join(archs)}, {to_compile} to compile{rest}: about "
            f"{format_seconds(total)} with {jobs} jobs")


def build_library(names: list[str], out: Path, archs: list[str], cache_dir: Path = DEFAULT_CACHE_DIR,
                  jobs: int | None = None, progress=print_progress) -> list[str]:
    """Compiles `names` for `archs` and links them into the shared library `out`; returns the names linked in.

    Starts the longest compiles first and reports the plan, then each finished kernel, to `progress` with the time
    elapsed and the time left: each unfinished kernel's measured family compile time (build_tools/build_estimate.py)
    scaled by this machine's speed on the kernels finished so far. Kernels whose folder has no requested arch are
    skipped. Raises KernelBuildError on any failure.
    """
    sources = [find_source(n) for n in names]
    jobs = jobs or default_jobs()
    expected = expected_seconds(sources, archs, cache_dir)
    sources.sort(key=lambda src: -expected[src.stem])
    clock = build_estimate.BuildClock(expected, jobs)
    objects: dict[str, Path] = {}
    progress(f"[kernels] building {plan_summary(expected, archs, jobs)} (objects cached in {cache_dir})")
    start = time.monotonic()

    def compile_timed(src: Path) -> Path | None:
        clock.started(src.stem, time.monotonic())
        return compile_object(src, archs, cache_dir)

    with concurrent.futures.ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = {pool.submit(compile_timed, src): src.stem for src in sources}
        for i, fut in enumerate(concurrent.futures.as_completed(futures), 1):
            obj = fut.result()
            now = time.monotonic()
            clock.finished(futures[fut], now)
            if obj is not None:
                objects[futures[fut]] = obj
            progress(f"[kernels {i}/{len(sources)}, {format_seconds(now - start)} elapsed, about "
                     f"{format_seconds(clock.seconds_left(now))} left] {futures[fut]}"
                     f"{'' if obj else ' (no target arch, skipped)'}")
    return link_library(objects, out, archs)


def main() -> None:
    parser = argparse.ArgumentParser(prog="python -m build_tools.kernel_lib",
                                     description="Build the torch-free cudal2 kernel library.")
    parser.add_argument("--out", type=Path, help="path of the shared library to write")
    parser.add_argument("--estimate", action="store_true",
                        help="print what a build would compile (cached objects left out) and how long it would take")
    parser.add_argument("--names", nargs="*", help="kernel names (default: tables + default set, CUDAL2_KERNELS)")
    parser.add_argument("--archs", default=os.environ.get("TORCH_CUDA_ARCH_LIST", DEFAULT_ARCHS))
    parser.add_argument("--cache-dir", type=Path, default=Path(os.environ.get("CUDAL2_KERNEL_CACHE", DEFAULT_CACHE_DIR)))
    parser.add_argument("--jobs", type=int, default=None)
    args = parser.parse_args()
    if args.out is None and not args.estimate:
        parser.error("give --out PATH (build the library) or --estimate (say what a build would take)")
    names = args.names if args.names else select_kernel_names(os.environ.get("CUDAL2_KERNELS"))
    archs = parse_arch_list(args.archs)
    if args.estimate:
        sources = [find_source(n) for n in names]
        print(plan_summary(expected_seconds(sources, archs, args.cache_dir), archs, args.jobs or default_jobs()))
        return
    linked = build_library(names, args.out, archs, args.cache_dir, args.jobs)
    print(f"linked {len(linked)} kernels into {args.out}")


if __name__ == "__main__":
    main()
