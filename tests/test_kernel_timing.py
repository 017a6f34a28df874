"""cudal2_testing.kernel_timing's pure parts: cold-weight operand sets and candidate records."""
import math
import types

import torch

from cudal2_catalog.config import Knobs
from cudal2_testing import kernel_timing


def test_cold_problem_runs_rotate_over_sets_larger_than_the_l2(monkeypatch):
    """--cold-weights: enough extra operand sets for 4x the L2 (capped), set 0 the checked one; warm: one set."""
    monkeypatch.setattr(kernel_timing, "l2_bytes", lambda: 2**20)
    monkeypatch.setattr(torch, "randn", lambda *shape, device=None, dtype=None: torch.ones(*shape, dtype=dtype))
    monkeypatch.setattr(torch, "empty", lambda *shape, device=None, dtype=None: torch.zeros(*shape, dtype=dtype))
    monkeypatch.setattr(kernel_timing, "fp32_reference", lambda a, b, layout: None)
    cold = kernel_timing.ProblemRun.random("nt", "fp16", 8, 256, 512, cold=True)  # 2*(8*512 + 256*512 + 8*256) B/set
    assert cold.n_sets == math.ceil(4 * 2**20 / (2 * (8 * 512 + 256 * 512 + 8 * 256))) == 16
    assert cold.operands(0) == (cold.a, cold.b) and cold.operands(15)[1].shape == (256, 512)
    assert kernel_timing.ProblemRun.random("nt", "fp16", 1, 64, 64, cold=True).n_sets == kernel_timing.COLD_MAX_SETS
    assert kernel_timing.ProblemRun.random("nt", "fp16", 8, 256, 512).n_sets == 1


def test_fastest_keeps_correct_timed_records_fastest_first():
    records = [{"kernel": "a", "correct": True, "us": 3.0}, {"kernel": "b", "correct": False, "us": 1.0},
               {"kernel": "c", "correct": True}, {"kernel": "d", "correct": True, "us": 2.0}]
    assert [r["kernel"] for r in kernel_timing.fastest(records, 5)] == ["d", "a"]
    assert [r["kernel"] for r in kernel_timing.fastest(records, 1)] == ["d"]


def test_candidate_records_carry_their_knobs_by_name(monkeypatch):
    a, b = torch.randn(8, 16), torch.randn(4, 16)
    ref = a @ b.t()

    class Fake:
        def run_kernel(self, name, a_, b_, bias, out, layout, splits, swizzle, raster):
            out.copy_(ref if (splits, swizzle, raster) == (2, 4, 1) else ref + 1)
    monkeypatch.setattr(kernel_timing, "_C", types.SimpleNamespace(tuning=Fake()))
    monkeypatch.setattr(kernel_timing, "time_call", lambda call, n_sets=1, target_ms=1.0: 7.0)
    run = kernel_timing.ProblemRun("nt", a, b, torch.empty(8, 4), ref, 1e-3)
    good = run.candidate("k", Knobs(2, 4, 1))
    assert good == {"kernel": "k", "splits": 2, "swizzle": 4, "raster": 1, "err": 0.0, "correct": True, "us": 7.0}
    assert Knobs.from_dict(good) == Knobs(2, 4, 1)
    bad = run.candidate("k", Knobs())
    assert not bad["correct"] and "us" not in bad
