"""Test-only fault injection: SIGKILL this process at a named point of a search command.

`CUDAL2_SEARCH_KILL_AT=<point>:<n>` kills the process (SIGKILL, no cleanup) the n-th time it reaches `checkpoint(point)`
(n defaults to 1). The points: `started` (the store is open, no run recorded yet), `proposed` (one problem's
proposals of a round are committed), `verdict` (an evaluation's verdict has arrived and is not stored yet) and `emit`
(the store is open for `emit`, nothing written yet). tests/test_search_resume_kill.py uses them to kill a run at
exact points; unset (always, outside those tests) a checkpoint does nothing.
"""
from __future__ import annotations

import collections
import os
import signal

ENV = "CUDAL2_SEARCH_KILL_AT"
POINTS = ("started", "proposed", "verdict", "emit")

_reached: collections.Counter[str] = collections.Counter()


def checkpoint(point: str) -> None:
    """Kills this process here if CUDAL2_SEARCH_KILL_AT names `point` and this is its n-th arrival."""
    spec = os.environ.get(ENV)
    if not spec:
        return
    name, _, count = spec.partition(":")
    if name not in POINTS or not (count or "1").isdigit():
        raise ValueError(f"{ENV}={spec!r}: expected <point>:<n> with a point among {POINTS}")
    if name != point:
        return
    _reached[point] += 1
    if _reached[point] == int(count or "1"):
        os.kill(os.getpid(), signal.SIGKILL)
