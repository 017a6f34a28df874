"""CPU tests of benchmarks.reference_shapes: paired ratios per round and the report."""
from __future__ import annotations

import random
import statistics
import types

from benchmarks import reference_shapes as ref

KERNEL = "sm90_tma_ws_fp16_nt_128x256x64_s0_c2x1_coop_persistent"


def finalist(kernel: str = KERNEL) -> dict:
    return {"kernel": kernel, "splits": 0, "swizzle": 8, "raster": 1, "err": 1e-4, "correct": True, "us": 1.0}


def test_rounds_pair_each_candidate_with_the_same_rounds_autotune_time(monkeypatch):
    times = {("lt", "autotune"): [100.0, 200.0, 100.0], ("lt", "heuristic"): [110.0, 110.0, 110.0],
             ("k", KERNEL): [105.0, 190.0, 110.0]}
    monkeypatch.setattr(ref, "kernel_call", lambda run, cand: ("k", cand["kernel"]))
    monkeypatch.setattr(ref, "time_call", lambda call, n_sets, target_ms: times[call].pop(0))
    run = types.SimpleNamespace(n_sets=1, baseline_call=lambda policy: ("lt", policy))
    entries = ref.rounds(run, [finalist()], 3, random.Random(0))
    assert [e["kernel"] for e in entries] == ["cublaslt-autotune", "cublaslt-heuristic", KERNEL]
    ours = entries[2]
    assert ours["us_rounds"] == [105.0, 190.0, 110.0] and ours["median_us"] == 110.0
    paired = [100 / 105, 200 / 190, 100 / 110]
    assert ours["paired_ratio_median"] == statistics.median(paired)
    assert (ours["paired_ratio_min"], ours["paired_ratio_max"]) == (min(paired), max(paired))
    assert entries[0]["paired_ratio_median"] == 1.0
    assert all(not t for t in times.values())  # every candidate timed once per round


def test_markdown_reports_the_verdict_per_problem():
    base = {"kernel": "cublaslt-autotune", "median_us": 200.0, "paired_ratio_median": 1.0}
    fast = {**finalist(), "median_us": 204.0, "paired_ratio_median": 0.98, "paired_ratio_min": 0.97,
            "paired_ratio_max": 0.99}
    slow = {**fast, "median_us": 230.0, "paired_ratio_median": 0.87, "paired_ratio_min": 0.86, "paired_ratio_max": 0.88}
    rows = [{"layout": "nt", "dtype": "fp16", "m": 4096, "n": 4096, "k": 4096, "rounds": [base, fast], "best": fast,
             "meets_target": True},
            {"layout": "nn", "dtype": "fp16", "m": 8192, "n": 8192, "k": 8192, "rounds": [base, slow], "best": slow,
             "meets_target": False}]
    doc = {"environment": {"gpu": "GPU"}, "rounds": 3, "wall_s": 1.0, "protocol": "p", "pdl_disabled": False,
           "rows": rows}
    text = ref.markdown(doc)
    assert "| nt | fp16 | 4096x4096x4096 |" in text and "0.980 (0.970-0.990) | yes |" in text
    assert "| nn | fp16 | 8192x8192x8192 |" in text and "0.870 (0.860-0.880) | no |" in text
    assert "PDL on" in text
