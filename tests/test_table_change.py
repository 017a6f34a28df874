"""CPU tests of studies.table_change: two tables benchmarked on the same problems, compared through each run's bar."""
from __future__ import annotations

import gzip
import json

import pytest

from studies import table_change

BAR = "cublaslt-autotune-tn"


def rows(times: dict[int, tuple[float, float, float]]) -> list[dict]:
    """Kernel-mode rows of NT fp16 problems m x 4096 x 4096: {m: (cudal2, bar, bar repeat) times}."""
    return [{"m": m, "n": 4096, "k": 4096, "dtype": "fp16", "impl": impl, "layout": "nt", "mode": "kernel",
             "ok": True, "median_us": us}
            for m, times_of_m in times.items() for impl, us in zip(("cudal2", BAR, f"{BAR}-repeat"), times_of_m)]


def test_the_changed_entries_are_compared_through_each_runs_bar(tmp_path):
    old_table = {"nt_fp16_64_4096_4096": {"cublaslt": {"tile": 1}}, "nt_fp16_128_4096_4096": {"kernel": "a"},
                 "nt_fp16_256_4096_4096": {"kernel": "b", "knobs": {"splits": 1}}}
    new_table = {"nt_fp16_64_4096_4096": {"kernel": "c"}, "nt_fp16_128_4096_4096": {"kernel": "a"},
                 "nt_fp16_256_4096_4096": {"kernel": "b", "knobs": {"splits": 1}, "cublaslt": {"tile": 2}}}
    # the new run's GPU is 10% slower throughout (bar and cudal2 alike); m=64's new kernel is 1.2x its bar
    old = {64: (10.0, 10.0, 10.0), 128: (20.0, 20.0, 20.0), 256: (40.0, 40.0, 40.0)}
    new = {64: (11.0 / 1.2, 11.0, 11.0), 128: (22.0, 22.0, 22.0), 256: (44.0, 44.0, 44.0)}
    paths = []
    for name, times in (("old", old), ("new", new)):
        paths.append(tmp_path / f"{name}.json.gz")
        paths[-1].write_bytes(gzip.compress(json.dumps({"rows": rows(times)}).encode()))
    speedups = [table_change.speedups([table_change.read_json(p)]) for p in paths]
    lines, doc = table_change.report(old_table, new_table, *speedups, [str(p) for p in paths])
    case = doc["cases"]["nt_fp16"]
    assert case["every shape"]["n"] == 3 and case["every shape"]["new"] == pytest.approx(1.2 ** (1 / 3))
    assert case["entry changed"]["n"] == 2            # m=64 (another kernel) and m=256 (a cuBLASLt field)
    assert case["kernel or knobs changed"] == {"n": 1, "old": 1.0, "new": pytest.approx(1.2), "old_bar_repeat": 1.0,
                                               "new_bar_repeat": 1.0}
    assert "| nt_fp16_64_4096_4096 | cuBLASLt | c | 1.000 | 1.200 |" in lines
