"""The search's real evaluation path on a GPU: the compile farm builds a config and search-written C ABI kernels,
the judge checks and times them through a candidate runner against cuBLASLt-autotune, and faulty kernels get their
verdicts (INCORRECT, CRASH, HANG) without stopping the run; honest kernels are not rejected.

    python3 -m pytest -m gpu tests/gpu/test_search_evaluator_gpu.py
"""
from __future__ import annotations

import pytest
import torch

from build_tools import kernel_lib
from search.backends.local import LocalBackend
from search import judge_timing
from search.candidate import CRASH, HANG, INCORRECT, OK, Candidate, Problem
from search_abi_kernels import naive_source

CONFIG = "sm80_cute_fp16_nt_64x64x64_s3_w4"
PROBLEM = Problem("nt", "fp16", 256, 256, 4096)


@pytest.fixture(scope="module")
def backend(tmp_path_factory):
    problem = kernel_lib.toolchain_problem()
    if problem:
        pytest.skip(problem)
    major, minor = torch.cuda.get_device_capability()
    local = LocalBackend(tmp_path_factory.mktemp("artifacts"), arch=major * 10 + minor, timeout_s=60.0, gpus=["0"],
                         cases=2)
    yield local
    local.close()


def source(variant: str) -> Candidate:
    return Candidate(source=naive_source(f"naive_{variant}", variant), source_name=f"naive_{variant}",
                     provenance="test")


def test_config_and_naive_kernels_get_their_verdicts(backend):
    cands = [Candidate(config=CONFIG, provenance="test"), source("correct"), source("wrong"), source("trap"),
             source("hang"), Candidate(config=CONFIG, knobs=(0, 1, 0))]
    outcomes = backend.compile(cands)
    assert all(o.ok for o in outcomes.values()), {k: o.log[-500:] for k, o in outcomes.items() if not o.ok}
    results = backend.evaluate([(c, PROBLEM) for c in cands])
    for cand, r in zip(cands, results):
        print(f"{cand.kernel_name} {cand.knobs}: {r.status} us={r.us} base={r.baseline_us} {r.reason[:300]}")
    statuses = [r.status for r in results]
    assert statuses == [OK, OK, INCORRECT, CRASH, HANG, OK], [(r.status, r.reason[:300]) for r in results]
    config = results[0]
    assert config.us > 0 and config.baseline_us > 0 and len(config.case_speedups) == 2
    assert config.max_rel_err is not None and config.gpu["arch"] == backend.environment()["arch"]
    assert config.gpu["pdl_disabled"] is True and "runner" in config.gpu["evaluation"]
    assert results[1].speedup < config.speedup   # the naive SIMT kernel is slower than a CuTe tensor-core tile
    assert results[2].reason.split(" check")[0] in ("random", "exact", "exact_small_k")
    assert "within" in results[4].reason and "killed" in results[4].reason


def test_a_long_problem_is_heated_and_judged_against_its_paired_baseline(backend):
    """A problem of HEAT_MIN_US or more per call takes the judge's heat request and paired baseline (the path of
    every large G1000 problem): an honest tile gets OK against a baseline that long."""
    cand, long = Candidate(config=CONFIG, provenance="test"), Problem("nt", "fp16", 4096, 4096, 8192)
    assert backend.compile([cand])[cand.build_key].ok
    [result] = backend.evaluate([(cand, long)])
    assert result.status == OK, result.reason
    assert result.baseline_us >= judge_timing.HEAT_MIN_US and 0.05 < result.speedup < 2.0
    # a clear loser is judged on its first case alone, any other candidate on every case
    assert len(result.case_speedups) == (1 if result.case_speedups[0] < judge_timing.SCREEN_SPEEDUP else 2)
