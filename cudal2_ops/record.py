"""Recording the GEMM problems a model runs, to tune them offline (`python -m cudal2_ops.tune --problems FILE`).

    with cudal2_ops.record_problems("problems.json"):
        model(x)                       # eager, torch.compile'd, or while a CUDA graph is being captured

The dispatcher notes every (layout, dtype, M, N, K) it makes a decision for while recording is on, whichever way the
call arrives (eager entry, compiled code's out= entry, the registered op, graph capture: nothing is timed, so recording
is safe inside capture). Calls that run torch itself (CPU tensors, other dtypes) are not GEMMs cudal2 can tune and are
not recorded.
"""
from __future__ import annotations

import contextlib
import threading
from pathlib import Path
from typing import Iterator

from cudal2_ops._extension import _C
from cudal2_ops.tune import Problem, write_problems

_lock = threading.Lock()
_active = False


class Recording:
    """The problems of one `record_problems` block (filled when the block exits)."""

    def __init__(self) -> None:
        self.problems: list[Problem] = []


@contextlib.contextmanager
def record_problems(path: str | Path | None = None) -> Iterator[Recording]:
    """Records the problems dispatched inside the block; on exit they are in the yielded `Recording` and, when `path`
    is given, merged into that problems file. Blocks do not nest."""
    global _active
    if _C is None:
        raise RuntimeError("cudal2_ops.record_problems needs the compiled extension (cudal2_ops.is_compiled() is False)")
    with _lock:
        if _active:
            raise RuntimeError("cudal2_ops.record_problems: a recording is already active (blocks do not nest)")
        _active = True
    recording = Recording()
    _C.tuning.recorded(True)  # drop anything left from an earlier recording
    _C.tuning.set_recording(True)
    try:
        yield recording
    finally:
        _C.tuning.set_recording(False)
        recording.problems = sorted(Problem(*row) for row in _C.tuning.recorded(True))
        with _lock:
            _active = False
    if path is not None:
        write_problems(Path(path), recording.problems)
