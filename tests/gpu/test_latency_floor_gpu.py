"""GPU tests of benchmarks.latency_floor: its floor kernels (the data-only kernel writes every element of C from what
it loaded, tails included, and captures into a CUDA graph; an empty kernel costs less than moving a large problem's
data) and one short run of the benchmark (one problem, every field, the results-file format)."""
from __future__ import annotations

import json

import pytest
import torch

from benchmarks import latency_floor as lf
from cudal2_testing.kernel_timing import time_call


@pytest.fixture(scope="module")
def floors() -> lf.FloorKernels:
    library, _ = lf.compile_floor_library(torch.cuda.get_device_capability())
    return lf.FloorKernels(library)


SENTINEL = 0x7E01  # an fp16 NaN payload the move kernel never writes from zero operands (it writes 0..3 and tails)


@pytest.mark.parametrize("m, n, k", [(64, 64, 64), (5, 7, 24), (3, 1001, 136), (257, 129, 8)])
def test_move_writes_all_of_c_from_the_loaded_data(floors, m, n, k):
    """Zero operands fold to 0: every element of C (the partial last chunk too) is overwritten; random operands then
    change C: its values come from the loads."""
    zeros_a = torch.zeros(m, k, dtype=torch.float16, device="cuda")
    zeros_b = torch.zeros(k, n, dtype=torch.float16, device="cuda")
    out = torch.full((m, n), SENTINEL, dtype=torch.int16, device="cuda").view(torch.float16)
    floors.move(zeros_a, zeros_b, out)
    torch.cuda.synchronize()
    from_zeros = out.view(torch.int16).clone()
    assert not (from_zeros == SENTINEL).any(), f"{(from_zeros == SENTINEL).sum().item()} elements left unwritten"
    floors.move(torch.randn_like(zeros_a), torch.randn_like(zeros_b), out)
    torch.cuda.synchronize()
    assert not torch.equal(from_zeros, out.view(torch.int16)), "C does not depend on the loaded data"


def test_rejects_strided_operands(floors):
    a = torch.zeros(16, 32, dtype=torch.float16, device="cuda")[:, :16]
    with pytest.raises(ValueError, match="contiguous"):
        floors.move(a, torch.zeros(16, 16, dtype=torch.float16, device="cuda"),
                    torch.zeros(16, 16, dtype=torch.float16, device="cuda"))


def test_empty_kernel_costs_less_than_moving_a_large_problem(floors):
    a = torch.randn(2048, 2048, dtype=torch.float16, device="cuda")
    b, out = torch.randn_like(a), torch.empty_like(a)
    empty_us = time_call(lambda i: floors.empty())
    move_us = time_call(lambda i: floors.move(a, b, out))
    assert 0 < empty_us < move_us, (empty_us, move_us)


def test_one_problem_run(tmp_path):
    out = tmp_path / "floor.json"
    assert lf.main(["--out", str(out), "--layouts", "nt", "--max-log2-mnk", "18"]) == 0
    doc = json.loads(out.read_text())
    assert doc["schema"] == 1 and doc["header"]["gpu"] and doc["complete"] is True
    assert set(doc["empty_kernel_us"]) == {"before", "after"}
    (row,) = doc["rows"]
    assert (row["m"], row["n"], row["k"], row["layout"]) == (64, 64, 64, "nt")
    assert row["move_us"] > 0 and row["cublaslt_us"] > 0
    assert row["tiny"] is None or row["tiny"]["kernel"].startswith("tiny_")
    assert all(c["kernel"].startswith("tiny_") for c in row["tiny_candidates"])
    assert doc["summary"]["problems"] == 1
