"""RayBackend on a local Ray instance: compiles as CPU tasks (a naive C ABI kernel and a broken one), evaluations
over two actors holding the simulated evaluator, verdicts in request order."""
from __future__ import annotations

import json

import pytest

from search.candidate import Candidate, Problem
from search.codegen import default_configs
from search.simulate import SimulatedBackend
from search_abi_kernels import naive_source

ray = pytest.importorskip("ray", reason="the Ray backend's tests need the optional ray package (pip install ray; "
                                        "CI installs it)")
from search.backends.ray_backend import RayBackend  # noqa: E402 (after the skip: the module needs ray)

PROBLEMS = [Problem("nt", "fp16", 128, 4096, 4096), Problem("nt", "fp16", 4096, 4096, 4096)]


@pytest.fixture(scope="module")
def local_ray():
    ray.init(num_cpus=2, include_dashboard=False)
    yield
    ray.shutdown()


def test_evaluations_over_actors_match_the_evaluator(local_ray, tmp_path):
    configs = [c for c in default_configs() if c.family == "sm90_tma_ws" and (c.dtype, c.layout) == ("fp16", "nt")]
    requests = [(Candidate(config=c.name), p) for c in configs[:5] for p in PROBLEMS]
    backend = RayBackend(tmp_path, arch=90, evaluator_factory=SimulatedBackend, actors=2, num_gpus=0)
    try:
        results = backend.evaluate(requests)
        assert len(backend.actors) == 2
        assert backend.environment()["gpu_name"] == SimulatedBackend().environment()["gpu_name"]
    finally:
        backend.close()
    expected = SimulatedBackend().evaluate(requests)
    assert [(r.status, r.us) for r in results] == [(e.status, e.us) for e in expected]


def test_compiles_run_as_tasks(local_ray, tmp_path, kernel_toolchain):
    good = Candidate(source=naive_source("ray_naive"), source_name="ray_naive")
    bad = Candidate(source=naive_source("ray_bad").replace("acc = 0.f", "acc = missing_name"), source_name="ray_bad")
    backend = RayBackend(tmp_path, arch=80, compile_only=True)
    outcomes = backend.compile([good, bad, good])
    assert outcomes[good.build_key].ok and not outcomes[bad.build_key].ok
    assert "missing_name" in outcomes[bad.build_key].log
    manifest = json.loads((tmp_path / "manifest.json").read_text())
    assert set(manifest["builds"]) == {good.build_key, bad.build_key}
    assert backend.environment()["compile_only"]
    with pytest.raises(RuntimeError, match="compile-only"):
        backend.evaluate([(good, PROBLEMS[0])])
