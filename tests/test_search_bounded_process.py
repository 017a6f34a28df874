"""Bounded runs of tools on untrusted input: the time limit kills the whole process group, output and files are
capped, stdin is empty."""
from __future__ import annotations

import time

from search.bounded_process import run_bounded


def test_an_ordinary_run():
    run = run_bounded(["sh", "-c", "echo out; echo err >&2; exit 3"], 10)
    assert run.returncode == 3 and not run.ok and not run.killed
    assert "out" in run.output and "err" in run.output


def test_stdin_is_empty():
    run = run_bounded(["cat", "/dev/stdin"], 10)
    assert run.ok and run.output == ""


def test_the_time_limit_kills_children_too(tmp_path):
    marker = tmp_path / "late"
    start = time.monotonic()
    run = run_bounded(["sh", "-c", f"(sleep 3; touch {marker}) & sleep 60"], 1)
    assert run.returncode is None and "time limit" in run.killed
    assert time.monotonic() - start < 10
    time.sleep(3.5)
    assert not marker.exists()    # the background child died with the group


def test_output_is_capped():
    start = time.monotonic()
    run = run_bounded(["yes"], 30, output_cap=10_000)
    assert "output cap" in run.killed and len(run.output) <= 10_000
    assert time.monotonic() - start < 10


def test_files_are_capped(tmp_path):
    run = run_bounded(["sh", "-c", f"head -c 4000000 /dev/zero > {tmp_path / 'big'}"], 30, file_cap=1 << 20)
    assert not run.ok
    assert (tmp_path / "big").stat().st_size <= 1 << 20
