"""The judge's batches on a GPU: several config candidates of one problem per judge request (one runner process,
one set of buffers, the baseline timed once) give the verdicts one candidate per request gives, faster.

    python3 -m pytest -m gpu tests/gpu/test_search_throughput_gpu.py -s
"""
from __future__ import annotations

import time

import pytest
import torch

from search.backends.local import LocalBackend, nvcc_archs
from search.candidate import OK, Candidate, Problem
from search.candidate_space import check
from search.compile_farm import installed_kernels

PROBLEM = Problem("nt", "fp16", 512, 4096, 4096)
COUNT = 8


def candidates(arch: int) -> list[Candidate]:
    names = sorted(installed_kernels(nvcc_archs(arch)))
    cands = [Candidate(config=name, provenance="test") for name in names]
    cands = [c for c in cands if check(c, PROBLEM, arch)[0]][:COUNT]
    if len(cands) < 2:
        pytest.skip("the installed kernel library holds fewer than 2 fp16 NT kernels for this GPU")
    return cands


def timed_verdicts(tmp_path, batch: int, cands: list[Candidate], arch: int):
    backend = LocalBackend(tmp_path / f"artifacts{batch}", arch=arch, gpus=["0"], timeout_s=120.0, batch=batch)
    try:
        backend.environment()   # the judge started (torch, CUDA context, roofline) before the clock
        start = time.monotonic()
        results = backend.evaluate([(c, PROBLEM) for c in cands])
        return results, time.monotonic() - start
    finally:
        backend.close()


def test_a_batch_gives_the_single_request_verdicts_faster(tmp_path):
    major, minor = torch.cuda.get_device_capability()
    arch = major * 10 + minor
    cands = candidates(arch)
    single, single_s = timed_verdicts(tmp_path, 1, cands, arch)
    batched, batched_s = timed_verdicts(tmp_path, COUNT, cands, arch)
    print(f"{len(cands)} candidates on {PROBLEM.key}: {single_s:.2f} s one per request, {batched_s:.2f} s batched "
          f"({single_s / batched_s:.2f}x; {60 * len(cands) / batched_s:.0f} evaluations per minute batched)")
    assert [r.status for r in batched] == [r.status for r in single]
    assert all(r.status == OK for r in batched), [(r.status, r.reason[:200]) for r in batched]
    docs = {str(r.baseline_cases) for r in batched}
    assert len(docs) == 1 and batched[0].baseline_cases["problem"] == PROBLEM.key   # timed once for the batch
    for a, b in zip(single, batched):
        assert abs(a.speedup / b.speedup - 1) < 0.15, (a.speedup, b.speedup)
    assert batched_s < single_s
