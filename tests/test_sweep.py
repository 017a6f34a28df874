"""search.sweep's pure parts: the problem set, the per-family summary, knob grids and candidate records."""
import math

import torch

from search import sweep
from search.config import DEFAULT_KNOBS, Knobs


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


def test_cold_problem_runs_rotate_over_sets_larger_than_the_l2(monkeypatch):
    """--cold-weights: enough extra operand sets for 4x the L2 (capped), set 0 the checked one; warm: one set."""
    monkeypatch.setattr(sweep, "l2_bytes", lambda: 2**20)
    monkeypatch.setattr(torch, "randn", lambda *shape, device=None, dtype=None: torch.ones(*shape, dtype=dtype))
    monkeypatch.setattr(torch, "empty", lambda *shape, device=None, dtype=None: torch.zeros(*shape, dtype=dtype))
    monkeypatch.setattr(sweep, "fp32_reference", lambda a, b, layout: None)
    cold = sweep.ProblemRun.random("nt", "fp16", 8, 256, 512, cold=True)   # 2 * (8*512 + 256*512 + 8*256) B per set
    assert cold.n_sets == math.ceil(4 * 2**20 / (2 * (8 * 512 + 256 * 512 + 8 * 256))) == 16
    assert cold.operands(0) == (cold.a, cold.b) and cold.operands(15)[1].shape == (256, 512)
    assert sweep.ProblemRun.random("nt", "fp16", 1, 64, 64, cold=True).n_sets == sweep.COLD_MAX_SETS
    assert sweep.ProblemRun.random("nt", "fp16", 8, 256, 512).n_sets == 1


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


def test_knob_grids_per_family():
    swizzle_raster = {Knobs(0, s, r) for s in (1, 2, 4, 8) for r in (1, 2)}
    assert set(sweep.knob_grid(SM90_COOP, 8192, 8192, 8192)) == swizzle_raster
    assert set(sweep.knob_grid(SM90_STREAMK, 64, 64, 8192)) == swizzle_raster | {Knobs(s) for s in (1, 2, 4)}
    sm80_square = sweep.knob_grid(SM80, 4096, 4096, 1024)
    assert set(sm80_square) == {Knobs(0, g, r) for g in (4, 8) for r in (1, 2)}
    splits = {Knobs(s) for s in (1, 2, 4, 8, 16, 32)}
    assert set(sweep.knob_grid(SM80, 64, 256, 4096)) == set(sm80_square) | splits
    assert set(sweep.knob_grid(SM80, 64, 64, 64)) == set(sm80_square) | {Knobs(1)}   # one K tile: no split
    assert set(sweep.knob_grid(SM80, 1024, 2048, 4096)) == set(sm80_square) | {Knobs(1), Knobs(2)}  # <= 1024 CTAs
    assert sweep.knob_grid(DECODE, 4, 4096, 4096) == [Knobs(s) for s in (1, 2, 4, 8, 16, 32)]
    assert sweep.knob_grid(DECODE, 4, 4096, 512) == [Knobs(1), Knobs(2), Knobs(4)]   # 4 K tiles
    assert sweep.knob_grid("an_external_kernel", 64, 64, 64) == []
    for name in (SM90_COOP, SM90_STREAMK, SM80, DECODE):
        grid = sweep.knob_grid(name, 64, 256, 4096)
        assert DEFAULT_KNOBS not in grid and len(set(grid)) == len(grid)


class FakeExtension:
    """`_C.run_kernel` on CPU tensors: rejects swizzle 8 and unknown kernels, computes wrong results with 2 splits."""

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
    monkeypatch.setattr(sweep, "_C", fake)
    monkeypatch.setattr(sweep, "time_call",
                        lambda call, n_sets=1, target_ms=1.0: default_us[fake.last[0]] - fake.last[1].swizzle / 10)
    run = sweep.ProblemRun("nt", a.half(), b.half(), torch.empty(64, 64, dtype=torch.half), ref, 1e-3)
    cands = sweep.measure_kernels(run, [SM90_COOP, SM90_STREAMK, SM80, SM80_SLOWER, "rejects_everything"])
    by_kernel = {name: [sweep.knobs_of(c) for c in cands if c["kernel"] == name] for name in default_us}
    assert by_kernel[SM80_SLOWER] == [DEFAULT_KNOBS]                  # behind the top 2 and its family's best
    sm80_grid = {k for k in sweep.knob_grid(SM80, 64, 64, 64) if k.swizzle != 8}   # the fake rejects swizzle 8
    assert sm80_grid and set(by_kernel[SM80]) == {DEFAULT_KNOBS} | sm80_grid      # its family's fastest: explored
    assert set(by_kernel[SM90_COOP]) == {DEFAULT_KNOBS} | {Knobs(0, s, r) for s in (1, 2, 4) for r in (1, 2)}
    assert set(by_kernel[SM90_STREAMK]) == (set(by_kernel[SM90_COOP]) | {Knobs(1), Knobs(2), Knobs(4)})
    wrong = [c for c in cands if c["splits"] == 2]
    assert len(wrong) == 1 and not wrong[0]["correct"] and "us" not in wrong[0]   # checked, never timed
    best = sweep.fastest(cands, 1)[0]
    assert (best["kernel"], sweep.knobs_of(best), best["us"]) == (SM90_COOP, Knobs(0, 4, 1), 9.6)
