"""Runs a tool on untrusted input (the compiler on a search-written source) with a time limit and capped output.

The process gets its own session, no stdin (`#include "/dev/stdin"` reads nothing), caps on the size of any file it
writes and on its address space (`ulimit -f`, `ulimit -v`: the preprocessor reading `#include "/dev/zero"` fails
within seconds instead of filling the machine's memory), and is killed with its whole process group when it outlives
`timeout_s` or prints more than `output_cap` bytes (nvcc's children die with it).
"""
from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import threading
import time

FILE_CAP_BYTES = 512 * 1024 * 1024   # largest file the tool may write (a CUTLASS translation unit's .ii is ~20 MB)
MEMORY_CAP_BYTES = 16 * 1024 ** 3     # address space of each process (cicc on a CUTLASS kernel stays well below)


@dataclasses.dataclass
class Bounded:
    """What a bounded run did: exit status (None when killed), its output (stdout then stderr, at most the cap),
    and why it was killed ("" when it exited by itself)."""

    returncode: int | None
    output: str
    killed: str = ""
    seconds: float = 0.0

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and not self.killed


def run_bounded(cmd: list[str], timeout_s: float, output_cap: int = 1 << 20, cwd: str | None = None,
                file_cap: int = FILE_CAP_BYTES, memory_cap: int = MEMORY_CAP_BYTES) -> Bounded:
    """Runs `cmd` (see the module docstring); never raises for what the tool does."""
    blocks = max(1, file_cap // 512)   # POSIX sh counts ulimit -f in 512-byte blocks and ulimit -v in KiB
    limits = f"ulimit -f {blocks} && ulimit -v {max(1, memory_cap // 1024)}"
    wrapped = ["/bin/sh", "-c", f'{limits} && exec "$@"', "bounded", *cmd]
    start = time.monotonic()
    proc = subprocess.Popen(wrapped, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                            cwd=cwd, start_new_session=True)
    chunks: list[bytes] = []
    state = {"size": 0, "over": False}

    def drain() -> None:
        for chunk in iter(lambda: proc.stdout.read(65536), b""):
            if state["size"] < output_cap:
                chunks.append(chunk[:output_cap - state["size"]])
            state["size"] += len(chunk)
            if state["size"] > output_cap and not state["over"]:
                state["over"] = True
                _kill_group(proc)

    reader = threading.Thread(target=drain, daemon=True)
    reader.start()
    killed = ""
    try:
        proc.wait(timeout=timeout_s)
    except subprocess.TimeoutExpired:
        killed = f"killed after {timeout_s:.0f} s (time limit)"
        _kill_group(proc)
        proc.wait()
    reader.join(timeout=5)
    if state["over"] and not killed:
        killed = f"killed after printing more than {output_cap} bytes (output cap)"
    elif proc.returncode in (-signal.SIGXFSZ, 128 + signal.SIGXFSZ) and not killed:
        killed = f"killed for writing a file larger than {file_cap} bytes"
    output = b"".join(chunks).decode(errors="replace")
    return Bounded(None if killed else proc.returncode, output, killed, time.monotonic() - start)


def _kill_group(proc: subprocess.Popen) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
