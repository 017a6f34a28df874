"""search.sweep's pure parts: the problem set, the per-family summary and which kernels' knob grids are explored."""
import math
import types

import torch

from cudal2_catalog.config import DEFAULT_KNOBS, Knobs
from cudal2_catalog.families import knob_grid
from cudal2_testing import kernel_timing
from search import sweep


def test_problems_put_reference_shapes_first_then_smallest():
    probs = sweep.problems(sample=20, seed=0, max_log2_mnk=21, llm_max_m=8, llm_dtypes=("fp16", "bf16"))
    assert [p[2:] for p in probs[:4]] == [sweep.REFERENCE_SHAPES[0]] * 2 + [sweep.REFERENCE_SHAPES[1]] * 2
    rest = probs[4:]
    sizes = [math.log2(m * n * k) for _, _, m, n, k in rest]
    assert sizes == sorted(sizes)
    assert ("nt", "fp16", 64, 64, 64) in probs and ("nn", "fp16", 64, 64, 64) in probs
    assert any(p[1] == "bf16" and p[0] == "nt" and p[2] <= 8 for p in probs)
    assert len(set(probs)) == len(probs)


def test_problems_max_m_keeps_only_small_m():
    probs = sweep.problems(sample=20, seed=0, max_log2_mnk=21, llm_max_m=64, llm_dtypes=("fp16",))
    small = sweep.problems(sample=20, seed=0, max_log2_mnk=21, llm_max_m=64, llm_dtypes=("fp16",), max_m=64)
    assert small == [p for p in probs if p[2] <= 64] and len(small) < len(probs)


def test_problems_min_and_max_m_keep_one_band():
    probs = sweep.problems(sample=0, seed=0, max_log2_mnk=0, llm_max_m=64, llm_dtypes=("fp16",))
    band = sweep.problems(sample=0, seed=0, max_log2_mnk=0, llm_max_m=64, llm_dtypes=("fp16",), max_m=64, min_m=32)
    assert band == [p for p in probs if 32 <= p[2] <= 64]
    assert {p[2] for p in band} == {32, 64}


def test_family_summary_uses_each_familys_best_correct_time():
    info = {"a1": {"family": "a"}, "a2": {"family": "a"}, "b1": {"family": "b"}}
    rows = [{"baseline_us": 10.0, "candidates": [{"kernel": "a1", "us": 5.0, "correct": True},
                                                 {"kernel": "a2", "us": 4.0, "correct": False},
                                                 {"kernel": "b1", "us": 20.0, "correct": True}]},
            {"baseline_us": 10.0, "candidates": [{"kernel": "a2", "us": 20.0, "correct": True}]}]
    summary = sweep.family_summary(rows, info)
    assert summary["a"]["problems"] == 2 and summary["a"]["wins"] == 1
    assert math.isclose(summary["a"]["geomean"], math.sqrt(2.0 * 0.5))
    assert summary["b"] == {"problems": 1, "geomean": 0.5, "min": 0.5, "max": 0.5, "wins": 0}


SM90_COOP = "sm90_tma_ws_fp16_nt_128x256x64_s0_c2x1_coop_persistent"
SM90_STREAMK = "sm90_tma_ws_fp16_nt_128x128x64_s0_c1x1_coop_streamk"
SM80 = "sm80_cute_fp16_nt_64x64x64_s3_w4"
SM80_SLOWER = "sm80_cute_fp16_nt_128x128x32_s4_w4"
DECODE = "decode_fp16_nt_8x128x128_s4_w8"


class FakeExtension:
    """The extension's `tuning.run_kernel` on CPU tensors: rejects swizzle 8 and unknown kernels, computes wrong
    results with 2 splits."""

    def __init__(self, ref):
        self.ref = ref
        self.last = None

    def run_kernel(self, name, a, b, bias, out, layout, splits, swizzle, raster):
        if swizzle == 8 or name == "rejects_everything":
            raise RuntimeError("unsupported")
        self.last = (name, Knobs(splits, swizzle, raster))
        out.copy_(torch.zeros_like(self.ref) if splits == 2 else self.ref)


def test_measure_kernels_explores_the_two_fastest_and_each_familys_fastest(monkeypatch):
    a, b = torch.randn(64, 64), torch.randn(64, 64)
    ref = a @ b.t()
    fake = FakeExtension(ref)
    default_us = {SM90_COOP: 10.0, SM90_STREAMK: 11.0, SM80: 12.0, SM80_SLOWER: 13.0}
    monkeypatch.setattr(kernel_timing, "_C", types.SimpleNamespace(tuning=fake))
    monkeypatch.setattr(kernel_timing, "time_call",
                        lambda call, n_sets=1, target_ms=1.0: default_us[fake.last[0]] - fake.last[1].swizzle / 10)
    run = kernel_timing.ProblemRun("nt", a.half(), b.half(), torch.empty(64, 64, dtype=torch.half), ref, 1e-3)
    cands = sweep.measure_kernels(run, [SM90_COOP, SM90_STREAMK, SM80, SM80_SLOWER, "rejects_everything"])
    by_kernel = {name: [Knobs.from_dict(c) for c in cands if c["kernel"] == name] for name in default_us}
    assert by_kernel[SM80_SLOWER] == [DEFAULT_KNOBS]                  # behind the top 2 and its family's best
    sm80_grid = {k for k in knob_grid(SM80, 64, 64, 64) if k.swizzle != 8}   # the fake rejects swizzle 8
    assert sm80_grid and set(by_kernel[SM80]) == {DEFAULT_KNOBS} | sm80_grid      # its family's fastest: explored
    assert set(by_kernel[SM90_COOP]) == {DEFAULT_KNOBS} | {Knobs(0, s, r) for s in (1, 2, 4) for r in (1, 2)}
    assert set(by_kernel[SM90_STREAMK]) == (set(by_kernel[SM90_COOP]) | {Knobs(1), Knobs(2), Knobs(4)})
    wrong = [c for c in cands if c["splits"] == 2]
    assert len(wrong) == 1 and not wrong[0]["correct"] and "us" not in wrong[0]   # checked, never timed
    best = kernel_timing.fastest(cands, 1)[0]
    assert (best["kernel"], Knobs.from_dict(best), best["us"]) == (SM90_COOP, Knobs(0, 4, 1), 9.6)
