"""Compiles one search-written kernel source into an object the compile farm may link, or says why it may not.

The source is untrusted: every step runs bounded (`search.bounded_process`: a time limit, an output cap, a file-size
cap, no stdin) and is judged on what the compiler really reads:

1. the scan of the source as written (`static_scan.scan`: directives, code, macro bodies);
2. every preprocessing pass nvcc runs for it (the host pass and one per device target, as `nvcc --dryrun` lists
   them), each with its dependency list: every file a pass reads must lie under the project's, CUDA's or CUTLASS's
   include folders (the pass's own -I / -isystem folders) or the host compiler's own header folders, so no other
   file's text can reach a log, the store, the memory file or a prompt. Then the scan of what each pass made of the
   source (`static_scan.scan_preprocessed`: macros expanded, token pasting done, both the host and device code);
3. the compile (its log kept truncated);
4. the object check (`search.object_check`: initializers, undefined symbols, writable data).

Only the compile's own diagnostics are kept as a log; a pass that fails keeps only the lines that name the source.
"""
from __future__ import annotations

import dataclasses
import functools
import os
import re
import shlex
import tempfile
from pathlib import Path

from build_tools import kernel_lib
from search.bounded_process import run_bounded
from search.llm.static_scan import scan, scan_preprocessed
from search.object_check import check_object

MAX_SOURCE_CHARS = 100_000           # a longer source is refused before anything runs
PREPROCESS_TIMEOUT_S = 120.0
PREPROCESS_MEMORY = 4 * 1024 ** 3    # address space of a preprocessing pass
COMPILE_TIMEOUT_S = 900.0            # a CUTLASS sm90 kernel takes 1-2 min on 2 cores
LOG_CAP = 64 * 1024                  # characters of compiler output kept
MAX_PREPROCESSED_BYTES = 256 * 1024 * 1024
REJECTED, FAILED = "rejected", "failed"   # a banned construct (a cheat) / a source that does not build


@dataclasses.dataclass
class SourceBuild:
    """The outcome: `status` "" (built), REJECTED (reasons name banned constructs) or FAILED (it does not build);
    `log` is what may be stored (capped)."""

    status: str
    reasons: list[str] = dataclasses.field(default_factory=list)
    log: str = ""

    @property
    def ok(self) -> bool:
        return not self.status


def oversized(text: str) -> str:
    """Why `text` is too long to be a kernel source (over MAX_SOURCE_CHARS characters), or "" when it is not."""
    if len(text) <= MAX_SOURCE_CHARS:
        return ""
    return f"the source is {len(text)} characters; the limit is {MAX_SOURCE_CHARS}"


def _parse_dryrun(output: str, source: str) -> list[list[str]]:
    """The preprocessing commands (`<host compiler> ... -E ... <source> -o <file>`) of an `nvcc --dryrun` listing."""
    commands = []
    for line in output.splitlines():
        if not line.startswith("#$ "):
            continue
        try:
            argv = shlex.split(line[3:])
        except ValueError:
            continue
        if "-E" in argv and source in argv and "-o" in argv:
            commands.append(argv)
    return commands


def preprocess_commands(source: Path, flags: list[str]) -> list[list[str]]:
    """The preprocessing passes nvcc would run to compile `source` with `flags`."""
    listing = run_bounded([kernel_lib.nvcc_path(), "--dryrun", *flags, "-c", str(source), "-o", os.devnull], 60.0)
    commands = _parse_dryrun(listing.output, str(source))
    if not commands:
        raise kernel_lib.KernelBuildError(f"nvcc --dryrun listed no preprocessing pass:\n{listing.output[-2000:]}")
    return commands


@functools.lru_cache(maxsize=None)
def compiler_include_dirs(compiler: str) -> tuple[str, ...]:
    """The host compiler's own header folders (`<compiler> -xc++ -E -v /dev/null`)."""
    listing = run_bounded([compiler, "-xc++", "-E", "-v", os.devnull], 60.0).output
    block = re.search(r"#include <\.\.\.> search starts here:\n(.*?)End of search list", listing, re.S)
    return tuple(os.path.realpath(line.strip()) for line in block.group(1).splitlines()) if block else ()


def allowed_roots(command: list[str]) -> tuple[str, ...]:
    """Folders a pass may read headers from: its -I / -isystem / -iquote / -idirafter folders and the compiler's."""
    roots = []
    for i, arg in enumerate(command):
        for flag in ("-I", "-isystem", "-iquote", "-idirafter"):
            if arg == flag and i + 1 < len(command):
                roots.append(command[i + 1])
            elif arg.startswith(flag) and len(arg) > len(flag) and flag == "-I":
                roots.append(arg[2:])
    return tuple(os.path.realpath(r) for r in roots) + compiler_include_dirs(command[0])


def read_dependencies(text: str) -> list[str]:
    """The prerequisites of a make-style dependency file (`-MD -MF`)."""
    body = text.replace("\\\n", " ")
    body = body.split(":", 1)[1] if ":" in body else ""
    return [p.replace("\\ ", " ") for p in re.findall(r"(?:\\ |[^\s])+", body)]


def outside_roots(dependencies: list[str], roots: tuple[str, ...], source: Path) -> list[str]:
    """The dependencies that are neither the source nor under one of `roots` (after resolving links and ..)."""
    own = os.path.realpath(source)
    outside = []
    for dep in dependencies:
        real = os.path.realpath(dep)
        if real != own and not any(real == r or real.startswith(r.rstrip("/") + "/") for r in roots):
            outside.append(dep)
    return outside


def _own_lines(output: str, source: Path) -> str:
    """The lines of a tool's output that name the source (its own diagnostics), capped."""
    return "\n".join(line for line in output.splitlines() if str(source) in line or source.name in line)[-LOG_CAP:]


def _preprocess(command: list[str], source: Path, workdir: Path, index: int) -> SourceBuild | list[str]:
    """Runs one pass; its scan hits (a list) or why the source is refused or fails (a SourceBuild)."""
    out, deps = workdir / f"pass{index}.ii", workdir / f"pass{index}.d"
    argv = list(command)
    argv[argv.index("-o") + 1] = str(out)
    argv += ["-MD", "-MF", str(deps)]
    run = run_bounded(argv, PREPROCESS_TIMEOUT_S, output_cap=LOG_CAP, cwd=str(workdir), memory_cap=PREPROCESS_MEMORY)
    if run.killed:
        return SourceBuild(REJECTED, [f"preprocessing was {run.killed} (an #include of a device or a pipe?)"])
    if deps.exists():
        outside = outside_roots(read_dependencies(deps.read_text(errors="replace")), allowed_roots(command), source)
        if outside:
            return SourceBuild(REJECTED, [f"#include of {path}: outside the project, CUDA, CUTLASS and the host "
                                          f"compiler's headers" for path in outside[:5]])
    if not run.ok or not out.exists():
        own = _own_lines(run.output, source)
        return SourceBuild(FAILED, [f"preprocessing failed (exit {run.returncode})" + (f": {own.splitlines()[0]}"
                                                                                        if own else "")], own)
    if out.stat().st_size > MAX_PREPROCESSED_BYTES:
        return SourceBuild(REJECTED, [f"the preprocessed source is {out.stat().st_size} bytes"])
    defines = " ".join(a for a in command if a.startswith("-D__CUDA_ARCH__="))
    pass_name = f"device pass {defines.split('=')[1]}" if defines else "host pass"
    return [f"{pass_name}: {hit}" for hit in scan_preprocessed(out.read_text(errors="replace"), str(source))]


def build_source_object(source: Path, arch_dir: str, archs: list[str], obj: Path,
                        compile_timeout_s: float = COMPILE_TIMEOUT_S) -> SourceBuild:
    """Checks and compiles the kernel source at `source` (kernel folder `arch_dir`, targets `archs`) into `obj`."""
    text = source.read_text(errors="replace")
    if oversized(text):
        return SourceBuild(REJECTED, [oversized(text)])
    hits = scan(text)
    if hits:
        return SourceBuild(REJECTED, hits)
    flags = kernel_lib.common_flags() + kernel_lib.gencode_flags(arch_dir, archs)
    with tempfile.TemporaryDirectory(prefix="cudal2_src_") as tmp:
        for i, command in enumerate(preprocess_commands(source, flags)):
            result = _preprocess(command, source, Path(tmp), i)
            if isinstance(result, SourceBuild):
                return result
            hits += result
    if hits:
        return SourceBuild(REJECTED, sorted(set(hits)))
    obj.parent.mkdir(parents=True, exist_ok=True)
    run = run_bounded([kernel_lib.nvcc_path(), *flags, "-c", str(source), "-o", str(obj)], compile_timeout_s,
                      output_cap=LOG_CAP)
    fatal = [w for w in kernel_lib.FATAL_PTXAS_WARNINGS if w in run.output]
    if not run.ok or fatal:
        obj.unlink(missing_ok=True)
        why = run.killed or (f"ptxas warning {fatal} (treated as an error)" if fatal else f"nvcc exit {run.returncode}")
        return SourceBuild(FAILED, [f"compiling {source.name} failed: {why}"], run.output[-LOG_CAP:])
    problems = check_object(obj)
    if problems:
        obj.unlink(missing_ok=True)
        return SourceBuild(REJECTED, [f"object: {p}" for p in problems], run.output[-LOG_CAP:])
    return SourceBuild("", [], run.output[-LOG_CAP:])
