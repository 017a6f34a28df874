"""The judge's reuse across batches on a GPU: a passing config candidate's runner serves the next batch (its regions
closed, the next batch's mapped) and gives the same verdicts and times as a fresh runner; a batch whose baseline must
be timed keeps it too (idle, it leaves the baseline's time as it is with no runner); a batch's check references are
made once.

    python3 -m pytest -m gpu tests/gpu/test_search_judge_reuse_gpu.py -s
"""
from __future__ import annotations

import pytest
import torch

from search.backends.local import nvcc_archs
from search.candidate import OK, Candidate, Problem
from search.candidate_space import check
from search.compile_farm import installed_kernels

PROBLEMS = [Problem("nt", "fp16", 512, 512, 1024), Problem("nt", "fp16", 1024, 256, 512)]


@pytest.fixture(scope="module")
def judge_and_kernels():
    from search.eval_worker import GpuEvaluator
    major, minor = torch.cuda.get_device_capability()
    arch = major * 10 + minor
    kernels = installed_kernels(nvcc_archs(arch))
    if not kernels:
        pytest.skip("no installed kernel library for this GPU")
    return GpuEvaluator(), kernels, arch


def request(problem: Problem, cands: list[Candidate], kernels: dict, baseline: dict | None) -> dict:
    return {"problem": problem.__dict__, "cases": 2, "timeout_s": 120.0, "baseline": baseline,
            "candidates": [{"candidate": c.to_json(), "artifact": str(kernels[c.config])} for c in cands]}


def configs_for(problem: Problem, kernels: dict, arch: int, count: int) -> list[Candidate]:
    feasible = [Candidate(config=name, provenance="test") for name in sorted(kernels)
                if name.startswith("sm90_tma_ws_fp16_nt") or name.startswith("sm80_cute_fp16_nt")]
    return [c for c in feasible if check(c, problem, arch)[0]][:count]


def test_a_kept_runner_serves_the_next_batch_with_the_same_verdicts(judge_and_kernels):
    judge, kernels, arch = judge_and_kernels
    first, second = PROBLEMS
    cands = configs_for(first, kernels, arch, 2)
    if len(cands) < 2:
        pytest.skip("fewer than 2 installed fp16 NT config kernels take the problem")
    # batch 1 of problem 1: baseline timed, a fresh runner, kept after the passing config candidates
    fresh = list(judge.judge(request(first, cands, kernels, None)))
    assert [r.status for r in fresh] == [OK, OK], [r.reason[:300] for r in fresh]
    kept = judge.kept_runner
    assert kept is not None and kept.proc.poll() is None
    doc = fresh[0].baseline_cases
    # batch 2 of the same problem, its baseline reused: the kept runner, mapped to the new regions
    again = list(judge.judge(request(first, cands, kernels, doc)))
    assert [r.status for r in again] == [OK, OK], [r.reason[:300] for r in again]
    assert judge.kept_runner is kept and kept.proc.poll() is None
    for a, b in zip(fresh, again):
        assert 0.8 < a.us / b.us < 1.25, (a.us, b.us)   # the same kernel, timed through a fresh and a kept runner
    # a problem whose baseline must be timed: timed with the kept runner idle, which then serves the batch
    other = configs_for(second, kernels, arch, 1)
    results = list(judge.judge(request(second, other, kernels, None)))
    assert [r.status for r in results] == [OK] and judge.kept_runner is kept and kept.proc.poll() is None
    # the same problem's baseline timed again with no runner alive reads the same (an idle runner costs it nothing)
    judge.kept_runner = None
    kept.close()
    alone = list(judge.judge(request(second, other, kernels, None)))
    assert [r.status for r in alone] == [OK]
    beside, without = results[0].baseline_cases["us"], alone[0].baseline_cases["us"]
    for a, b in zip(beside, without):
        assert 0.9 < a / b < 1.1, (beside, without)
