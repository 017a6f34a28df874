"""Torch parity of the public API on CUDA: the strategies of tests/test_parity_cpu.py with CUDA operands (more
examples), operands on two devices, and explicit cases that check the tuned path is taken where it applies."""
from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings

import cudal2_ops
from test_parity_cpu import (check_linear_parity, check_matmul_parity, linear_case, matmul_case, outcome,
                             assert_same_outcome, values)

pytestmark = pytest.mark.skipif(not cudal2_ops.is_available(), reason="compiled extension not built")

CUDA_DTYPES = [torch.float16, torch.bfloat16, torch.float16, torch.bfloat16, torch.float32, torch.float64,
               torch.complex64]
GPU_SETTINGS = settings(max_examples=600, deadline=None, database=None,
                        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


@GPU_SETTINGS
@given(matmul_case("cuda", CUDA_DTYPES))
def test_matmul_parity_with_torch(case):
    check_matmul_parity(case)


@GPU_SETTINGS
@given(linear_case("cuda", CUDA_DTYPES))
def test_linear_parity_with_torch(case):
    check_linear_parity(case)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("bias_shape,fused", [((), True), ((1,), True), ((96,), True), ((1, 96), True),
                                              ((1, 1), True), ((33, 96), False), ((33, 1), False)])
def test_bias_forms_take_the_tuned_path_where_it_applies(dtype, bias_shape, fused):
    """[N], [1, N], [1] and 0-d biases are fused (table kernel or cuBLASLt); others run F.linear. Both give torch's
    result."""
    x, w = values((33, 48), dtype, "cuda"), values((96, 48), dtype, "cuda")  # |sums| <= 194: exact in bf16
    bias = values(bias_shape, dtype, "cuda")
    path = cudal2_ops.explain(x, w, bias, layout="nt")["path"]
    assert (path in ("kernel", "cublaslt")) == fused, path
    torch.testing.assert_close(cudal2_ops.linear(x, w, bias), F.linear(x, w, bias), rtol=0, atol=0)


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_views_take_the_tuned_path(dtype):
    """Transposed, expanded and overlapping views of fp16/bf16 operands are staged and run the tuned path."""
    x = values((111,), dtype, "cuda").as_strided((48, 64), (1, 1))  # overlapping rows (47 + 64 elements)
    w = values((64, 1), dtype, "cuda").expand(64, 80)  # [K, N] with stride 0 along N
    assert cudal2_ops.explain(x, w)["path"] in ("kernel", "cublaslt")
    torch.testing.assert_close(cudal2_ops.matmul(x, w), torch.matmul(x, w), rtol=0, atol=0)


def test_operands_on_two_devices_raise_like_torch():
    cuda, cpu = values((4, 8), torch.float16, "cuda"), values((8, 3), torch.float16, "cpu")
    for ours, theirs in [(lambda: cudal2_ops.matmul(cuda, cpu), lambda: torch.matmul(cuda, cpu)),
                         (lambda: cudal2_ops.linear(cuda, cpu.t()), lambda: F.linear(cuda, cpu.t())),
                         (lambda: cudal2_ops.linear(cuda, cpu.t().cuda(), values((3,), torch.float16, "cpu")),
                          lambda: F.linear(cuda, cpu.t().cuda(), values((3,), torch.float16, "cpu")))]:
        assert_same_outcome(outcome(ours), outcome(theirs), {"devices": "cuda and cpu"})


@pytest.mark.parametrize("n", [0, 3])
@pytest.mark.parametrize("other", [(torch.bfloat16, "cuda"), (torch.float16, "cpu"), (torch.float32, "cuda")])
def test_mixed_operands_of_a_non_contiguous_batch_follow_torch(n, other):
    """An fp16 CUDA batch, transposed, times an operand of another dtype or device: torch's empty result where the
    product is empty (n = 0) and torch's error type otherwise (the CPU test's case, with CUDA's tuned dtypes)."""
    dtype, device = other
    a = values((2, 4, 4), torch.float16, "cuda").transpose(1, 2)
    check_matmul_parity({"a": a, "b": values((4, n), dtype, device), "out": None})
    check_linear_parity({"x": a, "weight": values((n, 4), dtype, device), "bias": None})


def test_direct_call_is_taken_for_plain_cuda_tensors():
    from cudal2_ops._extension import _C

    x, w = values((4, 64), torch.float16, "cuda"), values((32, 64), torch.float16, "cuda")
    assert _C.direct_call_allowed(x, w)
    with torch.inference_mode():
        assert _C.direct_call_allowed(values((4, 64), torch.float16, "cuda"), w)
