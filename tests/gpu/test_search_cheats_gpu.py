"""Runtime cheats judged on a GPU: kernels built without the compile farm's static checks (as if a cheat had slipped
past them) must still be rejected by the judge, each with its reason, while the honest kernel passes beside them.

- stream escape: work on the legacy default stream, the per-thread stream or a private stream;
- launch skipping keyed on pointers (a static table of outputs already written);
- fp16 accumulation at small K that no banned token spells (the accumulator rounded through __float2half);
- a constructor that patches the runner's Python to report replays 100x faster (the judge times them itself).

    python3 -m pytest -m gpu tests/gpu/test_search_cheats_gpu.py
"""
from __future__ import annotations

import pytest
import torch

from build_tools import kernel_lib
from search.backends.local import nvcc_archs
from search.candidate import INCORRECT, OK, SUSPICIOUS, Candidate, Problem
from search.evaluator import EvaluatorPool
from search_abi_kernels import naive_source
from search_cheat_kernels import RUNTIME_CHEATS

PROBLEM = Problem("nt", "fp16", 128, 128, 256)


@pytest.fixture(scope="module")
def libraries(tmp_path_factory):
    """label -> (candidate, shared library), compiled and linked directly (no scan, no object check)."""
    problem = kernel_lib.toolchain_problem()
    if problem:
        pytest.skip(problem)
    root = tmp_path_factory.mktemp("cheats")
    major, minor = torch.cuda.get_device_capability()
    archs = nvcc_archs(major * 10 + minor)
    sources = {**RUNTIME_CHEATS, "honest": naive_source("cheat_honest")}
    built = {}
    for label, text in sources.items():
        name = f"cheat_{label}"
        path = root / "src" / "sm80" / f"{name}.cu"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
        obj = kernel_lib.compile_object(path, archs, root / "cache")
        kernel_lib.link_library({name: obj}, root / f"{name}.so", archs)
        built[label] = (Candidate(source=text, source_name=name, provenance="test"), str(root / f"{name}.so"))
    return built


@pytest.fixture(scope="module")
def verdicts(libraries):
    pool = EvaluatorPool(["0"], timeout_s=120.0, cases=2)
    try:
        labels = sorted(libraries)
        results = pool.evaluate([(libraries[label][0], PROBLEM, libraries[label][1]) for label in labels])
    finally:
        pool.close()
    for label, r in zip(labels, results):
        print(f"{label}: {r.status} us={r.us} base={r.baseline_us} {r.reason[:400]}")
    return dict(zip(labels, results))


def test_the_honest_kernel_passes(verdicts):
    honest = verdicts["honest"]
    assert honest.status == OK, honest.reason
    assert honest.us > 0 and honest.gpu["pdl_disabled"] is True


@pytest.mark.parametrize("label", ["legacy_stream", "per_thread_stream", "private_stream"])
def test_work_off_the_callers_stream_is_rejected(verdicts, label):
    verdict = verdicts[label]
    assert verdict.status in (INCORRECT, SUSPICIOUS), (verdict.status, verdict.reason)
    assert any(word in verdict.reason for word in ("stream", "graph")), verdict.reason


def test_pointer_keyed_skipping_is_rejected(verdicts):
    verdict = verdicts["pointer_skip"]
    assert verdict.status == INCORRECT and "check" in verdict.reason, verdict.reason


def test_small_k_fp16_accumulation_is_rejected(verdicts):
    verdict = verdicts["fp16_rounded"]
    assert verdict.status == INCORRECT, verdict.reason
    assert verdict.reason.split(" check")[0] in ("random", "exact", "exact_small_k"), verdict.reason


def test_a_runner_patched_by_a_constructor_cannot_fake_its_time(verdicts):
    verdict, honest = verdicts["lying_runner"], verdicts["honest"]
    assert verdict.status == SUSPICIOUS and "runner's own" in verdict.reason, verdict.reason
    assert verdict.us == pytest.approx(honest.us, rel=0.5)   # the judge's own time: honest, not 100x faster
