"""Torch parity of the public API as a property: for any operands, `cudal2_ops.matmul` / `linear` return what
`torch.matmul` / `F.linear` return or raise the same exception class. The strategies here (shapes, strides, dtypes,
bias and out= forms) also drive tests/gpu/test_parity_gpu.py.

Operand values are small integers, so every dtype computes them exactly and results compare for equality whatever
path (table kernel, cuBLASLt, torch) runs them.
"""
from __future__ import annotations

import math
import warnings
from typing import Callable

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import cudal2_ops

needs_ext = pytest.mark.skipif(not cudal2_ops.is_compiled(), reason="compiled extension not built")

CPU_DTYPES = [torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int64, torch.int32, torch.uint8,
              torch.bool, torch.complex64, torch.complex128]
VIEW_FORMS = ["contiguous", "transposed", "strided", "expanded", "overlapping", "offset"]
# The bias forms F.linear accepts for some input, and some it rejects: "fused" forms are added in cudal2's epilogue.
BIAS_FORMS = ["none", "n", "one", "scalar", "row", "one_one", "output", "broadcast", "wrong_size", "other_dtype"]
OUT_FORMS = ["right", "wrong_shape", "empty", "wrong_dtype", "transposed"]
CPU_SETTINGS = settings(max_examples=400, deadline=5000, database=None,
                        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])


def values(shape: tuple[int, ...], dtype: torch.dtype, device: str) -> torch.Tensor:
    """Integers in [-2, 2] of `dtype` (exact in every dtype for the sizes drawn here)."""
    return torch.randint(-2, 3, shape, device=device).to(dtype)


@st.composite
def operand(draw, shape: tuple[int, ...], dtype: torch.dtype, device: str) -> torch.Tensor:
    """A tensor of logical `shape` in one of VIEW_FORMS: contiguous, a transposed view, a stepped slice, an expanded
    (stride-0) view, an overlapping as_strided view, or a view one element into its storage (misaligned pointer)."""
    form = draw(st.sampled_from(VIEW_FORMS))
    if form == "transposed" and len(shape) >= 2:
        return values(shape[:-2] + (shape[-1], shape[-2]), dtype, device).transpose(-1, -2)
    if form == "strided" and shape:
        return values(shape[:-1] + (2 * shape[-1],), dtype, device)[..., ::2]
    if form == "expanded" and shape:
        ones = draw(st.lists(st.booleans(), min_size=len(shape), max_size=len(shape)))
        small = tuple(1 if one else size for one, size in zip(ones, shape))
        return values(small, dtype, device).expand(shape)
    if form == "overlapping" and shape:
        # Every stride 1: element (i, j, ...) is storage[i + j + ...], rows overlap.
        storage = values((max(sum(s - 1 for s in shape), 0) + 1,), dtype, device)
        return storage.as_strided(shape, (1,) * len(shape))
    if form == "offset":
        return values((math.prod(shape) + 1,), dtype, device)[1:].view(shape)
    return values(shape, dtype, device)


def dims(max_size: int = 5) -> st.SearchStrategy[int]:
    """A dimension: mostly 1..max_size, sometimes 0 (empty)."""
    return st.one_of(st.integers(1, max_size), st.just(0)) if max_size > 1 else st.integers(0, 1)


@st.composite
def matmul_case(draw, device: str, dtypes: list[torch.dtype]) -> dict:
    """Operands of torch.matmul: ranks 0-4 with broadcast batch dims, mostly matching K, sometimes a mismatch in K,
    dtype or rank; and an out= form or none."""
    dtype = draw(st.sampled_from(dtypes))
    k, m, n = draw(dims(8)), draw(dims()), draw(dims())
    a_rank, b_rank = draw(st.sampled_from([0, 1, 2, 2, 2, 3, 3, 4])), draw(st.sampled_from([0, 1, 2, 2, 2, 2, 3]))
    batch = tuple(draw(st.lists(dims(3), min_size=max(a_rank - 2, 0), max_size=max(a_rank - 2, 0))))
    a_shape = {0: (), 1: (k,)}.get(a_rank, batch + (m, k))
    b_k = k if draw(st.integers(0, 9)) else k + 1
    b_batch = tuple(1 if draw(st.booleans()) else size for size in batch[-1:]) if b_rank == 3 else ()
    b_shape = {0: (), 1: (b_k,)}.get(b_rank, b_batch + (b_k, n))
    b_dtype = dtype if draw(st.integers(0, 9)) else draw(st.sampled_from(dtypes))
    a = draw(operand(a_shape, dtype, device))
    b = draw(operand(b_shape, b_dtype, device))
    out_form = draw(st.sampled_from(["none"] * 3 + OUT_FORMS))
    return {"a": a, "b": b, "out": None if out_form == "none" else out_like(a, b, out_form)}


def out_like(a: torch.Tensor, b: torch.Tensor, form: str) -> torch.Tensor:
    """An out= tensor for matmul(a, b) in one of OUT_FORMS (shape taken from torch's own result when it has one)."""
    try:
        shape = torch.matmul(torch.zeros(a.shape), torch.zeros(b.shape)).shape
    except RuntimeError:
        shape = (2, 3)
    if form == "wrong_shape":
        return torch.zeros((shape[0] + 1,) + tuple(shape[1:]) if shape else (3,), dtype=a.dtype, device=a.device)
    if form == "empty":
        return torch.zeros(0, dtype=a.dtype, device=a.device)
    if form == "wrong_dtype":
        return torch.zeros(shape, dtype=torch.float64 if a.dtype != torch.float64 else torch.float32, device=a.device)
    if form == "transposed" and len(shape) >= 2:
        return torch.zeros(tuple(shape[:-2]) + (shape[-1], shape[-2]), dtype=a.dtype, device=a.device).transpose(-1, -2)
    return torch.zeros(shape, dtype=a.dtype, device=a.device)


def bias_for(form: str, out_shape: tuple[int, ...], n: int, dtype: torch.dtype, device: str,
             draw) -> torch.Tensor | None:
    """A bias of `form` (BIAS_FORMS) for a linear whose output would be `out_shape` (last dim n)."""
    shapes = {"n": (n,), "one": (1,), "scalar": (), "row": (1, n), "one_one": (1, 1), "output": out_shape,
              "wrong_size": (n + 1,), "other_dtype": (n,)}
    if form == "none":
        return None
    if form == "broadcast":  # the output's trailing dims, some of them 1: [3, 5]-style biases
        trailing = out_shape[len(out_shape) - draw(st.integers(1, max(len(out_shape), 1))):]
        shape = tuple(1 if draw(st.booleans()) else size for size in trailing)
    else:
        shape = shapes[form]
    other = torch.float64 if dtype != torch.float64 else torch.float32
    return draw(operand(shape, other if form == "other_dtype" else dtype, device))


@st.composite
def linear_case(draw, device: str, dtypes: list[torch.dtype]) -> dict:
    """Operands of F.linear: x of rank 1-4 (sometimes 0), weight [N, K] (sometimes [K] or a K mismatch), and a bias
    in one of BIAS_FORMS."""
    dtype = draw(st.sampled_from(dtypes))
    k, n = draw(dims(8)), draw(dims())
    x_rank = draw(st.sampled_from([0, 1, 2, 2, 2, 3, 3, 4]))
    lead = tuple(draw(st.lists(dims(4), min_size=max(x_rank - 1, 0), max_size=max(x_rank - 1, 0))))
    x_shape = () if x_rank == 0 else lead + (k,)
    w_k = k if draw(st.integers(0, 9)) else k + 1
    w_shape = (w_k,) if draw(st.integers(0, 14)) == 0 else (n, w_k)
    x = draw(operand(x_shape, dtype, device))
    weight = draw(operand(w_shape, dtype, device))
    out_shape = lead + (n,) if len(w_shape) == 2 else lead
    bias = bias_for(draw(st.sampled_from(BIAS_FORMS)), out_shape, n, dtype, device, draw)
    return {"x": x, "weight": weight, "bias": bias}


def outcome(call: Callable[[], torch.Tensor]) -> torch.Tensor | Exception:
    """The call's result, or the exception it raised (warnings, e.g. torch's out= resize warning, silenced)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        try:
            return call()
        except Exception as exc:  # noqa: BLE001 - the class is what the test compares
            return exc


def assert_same_outcome(got: torch.Tensor | Exception, want: torch.Tensor | Exception, case: dict) -> None:
    """Both raised the same exception class, or both returned equal tensors of one shape, dtype and device."""
    if isinstance(want, Exception):
        assert isinstance(got, Exception), f"torch raised {want!r}, cudal2 returned a result; case {case}"
        assert type(got) is type(want), f"cudal2 raised {got!r}, torch raised {want!r}; case {case}"
        return
    assert not isinstance(got, Exception), f"cudal2 raised {got!r}, torch returned a result; case {case}"
    assert (got.shape, got.dtype, got.device) == (want.shape, want.dtype, want.device), case
    torch.testing.assert_close(got, want, rtol=0, atol=0, equal_nan=True, msg=lambda m: f"{m}; case {case}")


def fresh_out(out: torch.Tensor) -> torch.Tensor:
    """A tensor with `out`'s sizes, strides, dtype and device (each call writes its own)."""
    return torch.empty_strided(out.size(), out.stride(), dtype=out.dtype, device=out.device).zero_()


def check_matmul_parity(case: dict) -> None:
    """cudal2_ops.matmul against torch.matmul on one case, out= included (the same tensor returned and written)."""
    a, b, out = case["a"], case["b"], case["out"]
    if out is None:
        assert_same_outcome(outcome(lambda: cudal2_ops.matmul(a, b)), outcome(lambda: torch.matmul(a, b)), case)
        return
    ours, theirs = fresh_out(out), fresh_out(out)
    got, want = outcome(lambda: cudal2_ops.matmul(a, b, out=ours)), outcome(lambda: torch.matmul(a, b, out=theirs))
    assert_same_outcome(got, want, case)
    if not isinstance(want, Exception):
        assert got.data_ptr() == ours.data_ptr() and ours.shape == theirs.shape, case
        assert_same_outcome(ours, theirs, case)


def check_linear_parity(case: dict) -> None:
    """cudal2_ops.linear against F.linear on one case."""
    x, weight, bias = case["x"], case["weight"], case["bias"]
    assert_same_outcome(outcome(lambda: cudal2_ops.linear(x, weight, bias)), outcome(lambda: F.linear(x, weight, bias)),
                        case)


@needs_ext
@CPU_SETTINGS
@given(matmul_case("cpu", CPU_DTYPES))
def test_matmul_parity_with_torch(case):
    check_matmul_parity(case)


@needs_ext
@CPU_SETTINGS
@given(linear_case("cpu", CPU_DTYPES))
def test_linear_parity_with_torch(case):
    check_linear_parity(case)


@needs_ext
@pytest.mark.parametrize("n", [0, 3])
def test_mixed_dtypes_give_torchs_empty_result_or_an_error_naming_both(n):
    """torch multiplies a non-contiguous batch by an operand of another dtype when the product is empty (hypothesis
    found it) and raises otherwise; cudal2 does the same, its error naming both operands."""
    a = torch.randn(2, 2, 2).transpose(1, 2)
    b, weight = torch.randn(2, n, dtype=torch.float64), torch.randn(n, 2, dtype=torch.float64)
    check_matmul_parity({"a": a, "b": b, "out": None})
    check_linear_parity({"x": a, "weight": weight, "bias": None})
    if n:
        with pytest.raises(RuntimeError, match=r"a \[2, 2, 2\] is Float but b \[2, 3\] is Double"):
            cudal2_ops.matmul(a, b)


@needs_ext
@pytest.mark.parametrize("x_shape", [(3, 4), (2, 3, 4), (2, 2, 3, 4), (4,)])
@pytest.mark.parametrize("bias_shape", [(), (1,), (5,), (1, 5), (1, 1), (3, 5), (3, 1), (1, 1, 5), (2, 3, 5), (6, 5)])
@pytest.mark.parametrize("x_transposed", [False, True])
def test_linear_bias_forms_follow_torch(x_shape, bias_shape, x_transposed):
    """The issue's biases ([1], 0-d, [3, 5]-style) and torch's rank-dependent rules: contiguous and transposed 3-D
    inputs broadcast differently in F.linear, and cudal2 follows each."""
    x = values(x_shape, torch.float32, "cpu")
    if x_transposed and len(x_shape) >= 3:
        x = x.transpose(0, 1).contiguous().transpose(0, 1)
    w, bias = values((5, 4), torch.float32, "cpu"), values(bias_shape, torch.float32, "cpu")
    case = {"x": x, "weight": w, "bias": bias}
    check_linear_parity(case)


@needs_ext
def test_rejected_bias_error_names_the_operands_and_what_is_supported():
    with pytest.raises(RuntimeError, match=r"bias \[4\] \(Float, cpu\).*\[N\], \[1, N\], \[1\] or 0-d"):
        cudal2_ops.linear(torch.randn(5, 7), torch.randn(3, 7), torch.randn(4))


@needs_ext
@pytest.mark.parametrize("call,name", [
    (lambda t: cudal2_ops.matmul(t, "b"), "b"),
    (lambda t: cudal2_ops.matmul(3, t), "a"),
    (lambda t: cudal2_ops.matmul(t, t, out=[1]), "out"),
    (lambda t: cudal2_ops.linear(t, None), "weight"),
    (lambda t: cudal2_ops.linear(t, t, 1.0), "bias"),
    (lambda t: cudal2_ops.explain(t, [[1.0]]), "b"),
    (lambda t: cudal2_ops.explain(t, t, bias="x"), "bias"),
])
def test_non_tensor_arguments_raise_type_error_naming_the_argument(call, name):
    """torch raises TypeError for these; so does cudal2, naming the argument instead of listing pybind overloads."""
    with pytest.raises(TypeError, match=rf"argument '{name}' must be a torch.Tensor"):
        call(torch.ones(2, 2))


@needs_ext
def test_explain_validates_inputs_on_cpu():
    """explain() raises what the call raises for operands torch rejects on every device, and names the bias it would
    hand to torch."""
    with pytest.raises(RuntimeError, match="same dtype"):
        cudal2_ops.explain(torch.randn(4, 8), torch.randn(8, 2, dtype=torch.float64))
    with pytest.raises(RuntimeError, match=r"has K=8 but b \[3, 7\]"):
        cudal2_ops.explain(torch.randn(4, 8), torch.randn(3, 7), layout="nt")
    info = cudal2_ops.explain(torch.randn(4, 8), torch.randn(3, 8), torch.randn(4, 3), layout="nt")
    assert info["path"] == "torch" and "bias [4, 3]" in info["reason"]
