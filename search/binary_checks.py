"""The judge's record of checks whose outcome belongs to a kernel binary, not to a problem.

Two of the judge's correctness checks test how a kernel is built rather than what it computes on one problem:
accumulation precision (exact integers at small K: fp16/bf16 accumulation rounds at every K) and stream ordering
(the launcher's work runs on the caller's stream and never synchronises the host). A kernel binary that passed
them for a (layout, dtype) passes them on every problem, so the judge (`search.eval_worker`) runs them once per
(library content, kernel, layout, dtype) and skips them for the binary's later candidates; everything else is still
checked per candidate and per problem (random and 0/1-exact results, guards, the captured graph, every output of
every timed replay and eager call). The library is named by the SHA-256 of its bytes, so a rebuilt or replaced file
is checked again; only passes are recorded.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

READ_BYTES = 1 << 20


class BinaryChecks:
    """Passed binary checks by (library SHA-256, kernel, layout, dtype), for one judge's life."""

    def __init__(self):
        self._passed: set[tuple[str, str, str, str, str]] = set()
        self._hashes: dict[tuple[str, int, int, int], str] = {}

    def content_hash(self, library: str) -> str:
        """SHA-256 of the library file, read again whenever its inode, size or modification time changed."""
        stat = os.stat(library)
        key = (str(Path(library).resolve()), stat.st_ino, stat.st_size, stat.st_mtime_ns)
        if key not in self._hashes:
            digest = hashlib.sha256()
            with open(library, "rb") as f:
                while chunk := f.read(READ_BYTES):
                    digest.update(chunk)
            self._hashes[key] = digest.hexdigest()
        return self._hashes[key]

    def binary(self, library: str, kernel: str, layout: str, dtype: str) -> tuple[str, str, str, str]:
        """The key of `kernel` in `library` (by content) for problems of `layout` and `dtype`."""
        return self.content_hash(library), kernel, layout, dtype

    def passed(self, binary: tuple[str, str, str, str], check: str) -> bool:
        """Whether `check` passed on this binary before."""
        return (*binary, check) in self._passed

    def record_pass(self, binary: tuple[str, str, str, str], check: str) -> None:
        self._passed.add((*binary, check))
