"""The Ray backend on this host's real GPUs: one LocalBackend actor per GPU, each on the GPU Ray gave it, builds as
Ray tasks, and an actor SIGKILLed mid-evaluation whose request is evaluated again (issue 27's fault check on real
hardware, on however many GPUs the host has).

    pip install '.[ray]'; python3 -m pytest -m gpu tests/gpu/test_search_ray_gpu.py
"""
from __future__ import annotations

import os
import signal
import threading
import time

import pytest
import torch

from build_tools import kernel_lib
from search.candidate import OK, Candidate, Problem

ray = pytest.importorskip("ray", reason="the Ray backend needs the optional ray package (pip install '.[ray]')")
from search.backends.ray_backend import RayBackend  # noqa: E402 (after the skip: the module needs ray)

CONFIG = "sm80_cute_fp16_nt_64x64x64_s3_w4"
PROBLEMS = [Problem("nt", "fp16", m, 1024, 2048) for m in (64, 256, 1024, 4096)]


@pytest.fixture(scope="module")
def gpu_backend(tmp_path_factory):
    problem = kernel_lib.toolchain_problem()
    if problem:
        pytest.skip(problem)
    ray.init(include_dashboard=False)  # every CPU and GPU of this host
    major, minor = torch.cuda.get_device_capability()
    backend = RayBackend.on_gpus(tmp_path_factory.mktemp("artifacts"), arch=major * 10 + minor)
    yield backend
    backend.close()
    ray.shutdown()


def test_one_actor_per_gpu_each_on_its_own_gpu(gpu_backend):
    placements = gpu_backend.placements()
    assert len(placements) == torch.cuda.device_count()
    assert all(len(p["gpu_ids"]) == 1 and p["cuda_visible_devices"] == p["gpu_ids"][0] for p in placements)
    assert len({p["gpu_ids"][0] for p in placements}) == len(placements)
    cand = Candidate(config=CONFIG, provenance="test")
    assert gpu_backend.compile([cand])[cand.build_key].ok
    results = gpu_backend.evaluate([(cand, p) for p in PROBLEMS])
    assert [r.status for r in results] == [OK] * len(PROBLEMS), [r.reason[:300] for r in results]
    assert all(r.us > 0 and r.baseline_us > 0 for r in results)
    assert gpu_backend.environment()["ray_workers"] == len(placements)


def test_sigkilled_gpu_actor_has_its_request_evaluated_again(gpu_backend):
    cand = Candidate(config=CONFIG, knobs=(0, 1, 0), provenance="test")
    assert gpu_backend.compile([cand])[cand.build_key].ok
    victim = gpu_backend.placements()[0]["pid"]
    requests = [(cand, p) for p in PROBLEMS] * (2 * torch.cuda.device_count())  # seconds of work for each actor
    killer = threading.Timer(0.5, os.kill, (victim, signal.SIGKILL))
    killer.start()
    began = time.monotonic()
    with pytest.warns(RuntimeWarning, match="evaluator actor died"):
        results = gpu_backend.evaluate(requests)
    print(f"{len(requests)} requests in {time.monotonic() - began:.1f} s; faults: {gpu_backend.faults}")
    assert [r.status for r in results] == [OK] * len(requests), [r.reason[:300] for r in results]
    assert len(gpu_backend.actors) == torch.cuda.device_count()  # Ray restarted it
    assert victim not in {p["pid"] for p in gpu_backend.placements()}
