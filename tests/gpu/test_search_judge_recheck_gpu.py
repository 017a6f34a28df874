"""Honest library kernels the judge once called SUSPICIOUS on an H100 (a time below the compute floor: the empty
bracket was measured while the judge's own references still ran; a wall clock over the bound: one slow eager batch,
or an eager stream slower than its graph) get OK verdicts, at times no faster than the GPU allows.

    python3 -m pytest -m gpu tests/gpu/test_search_judge_recheck_gpu.py -s
"""
from __future__ import annotations

import pytest
import torch

from search.backends.local import nvcc_archs
from search.candidate import OK
from search.compile_farm import installed_kernels
from search.evaluator import EvaluatorPool
from search.judge_bench import recheck_requests


def test_earlier_false_suspicious_verdicts_are_ok():
    major, minor = torch.cuda.get_device_capability()
    arch = major * 10 + minor
    work = recheck_requests(arch, installed_kernels(nvcc_archs(arch)))
    if not work:
        pytest.skip("none of the re-checked kernels is installed for this GPU")
    pool = EvaluatorPool(["0"], timeout_s=300.0, cases=3)
    try:
        peak = pool.environment()["peak_tflops"]
        results = pool.evaluate(work)
    finally:
        pool.close()
    for (cand, problem, _), r in zip(work, results):
        floor_us = 2 * problem.m * problem.n * problem.k / (peak * 1e6)
        print(f"{cand.config} {cand.knobs} {problem.key}: {r.status} us={r.us} floor={floor_us:.1f} {r.reason[:300]}")
    assert [r.status for r in results] == [OK] * len(work), [(r.status, r.reason[:300]) for r in results]
    for (cand, problem, _), r in zip(work, results):
        assert r.us >= 0.8 * 2 * problem.m * problem.n * problem.k / (peak * 1e6), (cand.config, problem.key, r.us)
