"""Public API on the CPU: torch semantics of the fallback path, errors, explain, op registration, autograd, compile."""
import os
import subprocess
import sys
import warnings

import pytest
import torch
import torch.nn.functional as F

import cudal2_ops
from cudal2_ops import ops

needs_ext = pytest.mark.skipif(not cudal2_ops.is_compiled(), reason="compiled extension not built")
DTYPES = [torch.float32, torch.float16, torch.bfloat16]


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("a_shape,b_shape", [((5, 7), (7, 3)), ((2, 5, 7), (7, 3)), ((7,), (7, 3)),
                                              ((2, 5, 7), (2, 7, 3)), ((5, 7), (7,))])
def test_matmul_matches_torch_bitwise(dtype, a_shape, b_shape):
    a, b = torch.randn(a_shape).to(dtype), torch.randn(b_shape).to(dtype)
    assert torch.equal(cudal2_ops.matmul(a, b), torch.matmul(a, b))


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_bias", [False, True])
def test_linear_matches_torch_bitwise(dtype, with_bias):
    x, w = torch.randn(3, 4, 16).to(dtype), torch.randn(8, 16).to(dtype)
    bias = torch.randn(8).to(dtype) if with_bias else None
    assert torch.equal(cudal2_ops.linear(x, w, bias), F.linear(x, w, bias))


def test_matmul_out_matches_torch():
    a, b = torch.randn(5, 7), torch.randn(7, 3)
    out = torch.empty(5, 3)
    result = cudal2_ops.matmul(a, b, out=out)
    assert result.data_ptr() == out.data_ptr()
    assert torch.equal(out, torch.matmul(a, b))


def test_empty_dims_follow_torch():
    a, b = torch.randn(4, 0), torch.randn(0, 3)
    assert torch.equal(cudal2_ops.matmul(a, b), torch.zeros(4, 3))
    assert cudal2_ops.matmul(torch.randn(0, 5), torch.randn(5, 3)).shape == (0, 3)


@needs_ext
def test_shape_mismatch_names_the_shapes():
    with pytest.raises(RuntimeError, match=r"cannot be multiplied.*\[5, 7\].*\[6, 3\]|\[5, 7\].*\[6, 3\].*cannot"):
        cudal2_ops.matmul(torch.randn(5, 7), torch.randn(6, 3))
    with pytest.raises(RuntimeError, match=r"input \[5, 7\] has 7 features \(last dim\) but weight \[3, 6\]"):
        cudal2_ops.linear(torch.randn(5, 7), torch.randn(3, 6))


@needs_ext
def test_dtype_mismatch_is_a_clear_error():
    with pytest.raises(RuntimeError, match=r"a \[5, 7\] is Float but b \[7, 3\] is Double; both must have the same"):
        cudal2_ops.matmul(torch.randn(5, 7), torch.randn(7, 3, dtype=torch.float64))


@needs_ext
def test_explain_says_why_cpu_runs_torch():
    info = cudal2_ops.explain(torch.randn(4, 8), torch.randn(8, 2))
    assert info["path"] == "torch" and "CUDA" in info["reason"]
    with pytest.raises(ValueError, match="layout must be"):
        cudal2_ops.explain(torch.randn(4, 8), torch.randn(8, 2), layout="tn")


@needs_ext
def test_ops_registered_and_opcheck_passes():
    a, b = torch.randn(4, 8, requires_grad=True), torch.randn(8, 3, requires_grad=True)
    torch.library.opcheck(torch.ops.cudal2.matmul.default, (a, b))
    x, w, bias = torch.randn(2, 4, 8, requires_grad=True), torch.randn(3, 8, requires_grad=True), torch.randn(3)
    torch.library.opcheck(torch.ops.cudal2.linear.default, (x, w, bias))


def assert_grads_match_torch(inputs: tuple[torch.Tensor, ...]) -> None:
    """The .grad of each of `inputs` (x, weight, bias) equals what F.linear(...).sum().backward() gives."""
    grads = [t.grad for t in inputs]
    for t in inputs:
        t.grad = None
    F.linear(*inputs).sum().backward()
    for got, t in zip(grads, inputs):
        torch.testing.assert_close(got, t.grad)


@needs_ext
@pytest.mark.parametrize("bias_shape", [(3,), (1,), (), (1, 3), (4, 3), (2, 4, 3)])
def test_autograd_matches_torch(bias_shape):
    """Gradients equal torch's for every bias form F.linear broadcasts (the bias gradient summed to its shape)."""
    x = torch.randn(2, 4, 8, dtype=torch.float64, requires_grad=True)
    w = torch.randn(3, 8, dtype=torch.float64, requires_grad=True)
    bias = torch.randn(bias_shape, dtype=torch.float64, requires_grad=True)
    cudal2_ops.linear(x, w, bias).sum().backward()
    assert_grads_match_torch((x, w, bias))


@needs_ext
@pytest.mark.parametrize("with_bias", [False, True])
def test_inductor_calls_the_out_entry_points(with_bias):
    """Inductor lowers the ops to extern calls of the extension's out= entry points instead of the boxed torch.ops
    call (a 1-D input runs torch's linear, as in eager). Results as in eager."""
    from torch._inductor import config
    from torch._inductor.utils import run_and_get_code

    def f(x, w, b, v):
        return cudal2_ops.linear(x, w, b), cudal2_ops.matmul(x, w.t()), cudal2_ops.linear(v, w)

    torch._dynamo.reset()
    x, w, v = torch.randn(2, 3, 8), torch.randn(4, 8), torch.randn(8)
    b = torch.randn(4) if with_bias else None
    with config.patch(force_disable_caches=True):
        out, codes = run_and_get_code(torch.compile(f, fullgraph=True), x, w, b, v)
    code = "\n".join(codes)
    assert code.count("extern_kernels.cudal2_linear(") == 1 and code.count("extern_kernels.cudal2_matmul(") == 1
    assert "torch.ops.cudal2" not in code
    for got, want in zip(out, f(x, w, b, v)):
        torch.testing.assert_close(got, want)


@needs_ext
def test_inductor_lowering_in_training():
    """Forward and backward graphs both call the extern kernels (the backward with a broadcast, stride-0 gradient);
    the gradients are torch's."""
    from torch._inductor import config
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    x, w, b = (torch.randn(*shape, requires_grad=True) for shape in ((2, 3, 8), (4, 8), (4,)))
    compiled = torch.compile(lambda x, w, b: cudal2_ops.linear(x, w, b).sum())
    with config.patch(force_disable_caches=True):
        _, codes = run_and_get_code(lambda: compiled(x, w, b).backward())
    code = "\n".join(codes)
    assert "extern_kernels.cudal2_linear(" in code and "extern_kernels.cudal2_matmul(" in code
    assert_grads_match_torch((x, w, b))


@needs_ext
def test_inductor_lowering_falls_back_when_torch_ir_differs(monkeypatch):
    """Where this torch's IR rejects the extern kernel as built, the graph keeps the op's fallback call, with a
    warning, and compiles."""
    from torch._inductor import config, ir
    from torch._inductor.utils import run_and_get_code

    def incompatible(*args, **kwargs):
        raise TypeError("unexpected keyword argument")

    monkeypatch.setattr(ir, "ExternKernelOut", incompatible)
    torch._dynamo.reset()
    x, w = torch.randn(2, 3, 8), torch.randn(4, 8)
    with config.patch(force_disable_caches=True), pytest.warns(RuntimeWarning, match="lowering of cudal2_linear"):
        out, codes = run_and_get_code(torch.compile(lambda x, w: cudal2_ops.linear(x, w), fullgraph=True), x, w)
    assert "torch.ops.cudal2.linear.default(" in "\n".join(codes)
    torch.testing.assert_close(out, F.linear(x, w))


@needs_ext
def test_inductor_cpp_wrapper_keeps_the_dispatcher_call():
    """The C++ wrapper has no Python extern kernels: the lowering leaves it the op's dispatcher call."""
    from torch._inductor import config
    from torch._inductor.utils import run_and_get_code

    torch._dynamo.reset()
    x, w = torch.randn(2, 3, 8), torch.randn(4, 8)
    with config.patch(cpp_wrapper=True, force_disable_caches=True):
        out, codes = run_and_get_code(torch.compile(lambda x, w: cudal2_ops.linear(x, w), fullgraph=True), x, w)
    code = "\n".join(codes)
    assert "cudal2::linear" in code and "extern_kernels.cudal2_linear" not in code
    torch.testing.assert_close(out, F.linear(x, w))


_COMPILE_SCRIPT = """
import torch, torch.nn.functional as F, cudal2_ops
from torch._inductor.utils import run_and_get_code
x, w = torch.randn(2, 8), torch.randn(4, 8)
out, codes = run_and_get_code(torch.compile(lambda x, w: cudal2_ops.linear(x, w)), x, w)
torch.testing.assert_close(out, F.linear(x, w))
print("fallback" if "torch.ops.cudal2.linear.default(" in "\\n".join(codes) else "lowered")
"""


def _compile_in_fresh_process(env: dict[str, str]) -> str:
    """Runs _COMPILE_SCRIPT in a new process with `env` added; returns how its compiled code calls the op."""
    done = subprocess.run([sys.executable, "-c", _COMPILE_SCRIPT], env={**os.environ, **env}, capture_output=True,
                          text=True, timeout=600)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


@needs_ext
def test_inductor_lowering_can_be_turned_off(tmp_path):
    """CUDAL2_DISABLE_INDUCTOR_LOWERING=1: a fresh process compiles the op to its torch.ops fallback call; without it,
    to the extern call. A process with the lowering off that Inductor's cache serves lowered code still runs it."""
    cache = {"TORCHINDUCTOR_CACHE_DIR": str(tmp_path / "inductor")}
    off = {"CUDAL2_DISABLE_INDUCTOR_LOWERING": "1"}
    assert _compile_in_fresh_process({**off, "TORCHINDUCTOR_FORCE_DISABLE_CACHES": "1"}) == "fallback"
    assert _compile_in_fresh_process(cache) == "lowered"
    assert _compile_in_fresh_process({**cache, **off}) == "lowered"  # served from the cache, extern kernels present


@needs_ext
def test_compile_fullgraph_traces_the_custom_op():
    def f(x, w):
        return cudal2_ops.linear(x, w).relu()

    compiled = torch.compile(f, fullgraph=True, backend="aot_eager")
    x, w = torch.randn(4, 8), torch.randn(3, 8)
    torch.testing.assert_close(compiled(x, w), f(x, w))


def test_without_extension_every_call_runs_torch_with_one_warning(monkeypatch):
    monkeypatch.setattr(ops, "_C", None)
    monkeypatch.setattr(ops._extension, "_warned", False)
    a, b = torch.randn(3, 4), torch.randn(4, 2)
    with pytest.warns(RuntimeWarning, match="every call runs torch"):
        assert torch.equal(cudal2_ops.matmul(a, b), a @ b)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert torch.equal(cudal2_ops.linear(a, b.t()), F.linear(a, b.t()))
    assert cudal2_ops.explain(a, b)["path"] == "torch"


@needs_ext
@pytest.mark.parametrize("a_shape,b_shape", [((2, 5, 8), (8, 3)), ((8,), (8, 3)), ((2, 5, 8), (2, 8, 3))])
def test_matmul_autograd_matches_torch(a_shape, b_shape):
    a = torch.randn(a_shape, dtype=torch.float64, requires_grad=True)
    b = torch.randn(b_shape, dtype=torch.float64, requires_grad=True)
    grad = torch.randn(torch.matmul(a, b).shape, dtype=torch.float64)
    cudal2_ops.matmul(a, b).backward(grad)
    ours = (a.grad.clone(), b.grad.clone())
    a.grad = b.grad = None
    torch.matmul(a, b).backward(grad)
    torch.testing.assert_close(ours[0], a.grad)
    torch.testing.assert_close(ours[1], b.grad)


@needs_ext
def test_out_with_grad_is_rejected_like_torch():
    a, b = torch.randn(4, 8, requires_grad=True), torch.randn(8, 3)
    with pytest.raises(RuntimeError):
        torch.matmul(a, b, out=torch.empty(4, 3))
    with pytest.raises(RuntimeError):
        cudal2_ops.matmul(a, b, out=torch.empty(4, 3))


# ---- the eager call path: direct kernel call, or the registered op where something must see the call -------------

class _RecordingMode(torch.utils._python_dispatch.TorchDispatchMode):
    """Records the ops it sees."""

    def __init__(self):
        super().__init__()
        self.seen = []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.seen.append(str(func))
        return func(*args, **(kwargs or {}))


class _LoggingTensor(torch.Tensor):
    """A wrapper subclass whose __torch_dispatch__ records every op called on it."""

    seen: list[str] = []

    @staticmethod
    def __new__(cls, elem):
        return torch.Tensor._make_wrapper_subclass(cls, elem.shape, dtype=elem.dtype, device=elem.device)

    def __init__(self, elem):
        self.elem = elem

    @classmethod
    def __torch_dispatch__(cls, func, types, args=(), kwargs=None):
        cls.seen.append(str(func))
        unwrap = lambda t: t.elem if isinstance(t, _LoggingTensor) else t  # noqa: E731
        return func(*[unwrap(a) for a in args], **{k: unwrap(v) for k, v in (kwargs or {}).items()})


@needs_ext
def test_direct_call_only_where_nothing_must_see_the_op():
    from cudal2_ops._extension import _C

    x, w = torch.randn(2, 8), torch.randn(3, 8)
    assert _C.direct_call_allowed(x, w)
    with torch.inference_mode():
        assert _C.direct_call_allowed(torch.randn(2, 8), torch.randn(3, 8))
    with torch.autocast("cpu"):
        assert _C.direct_call_allowed(x, w)
    assert not _C.direct_call_allowed(x, w.requires_grad_())
    with torch.no_grad():
        assert _C.direct_call_allowed(x, w)
    assert not _C.direct_call_allowed(x, torch.randn(3, 8), torch.randn(3, dtype=torch.complex64).conj())
    with _RecordingMode():
        assert not _C.direct_call_allowed(x, x)
    assert not _C.direct_call_allowed(_LoggingTensor(x), x)
    assert not _C.direct_call_allowed(x.to("meta"), x.to("meta"))


@needs_ext
def test_dispatch_mode_and_subclass_see_the_ops():
    x, w, b = torch.randn(2, 8), torch.randn(3, 8), torch.randn(3)
    with _RecordingMode() as mode:
        got = (cudal2_ops.linear(x, w, b), cudal2_ops.matmul(x, w.t()),
               cudal2_ops.matmul(x, w.t(), out=torch.empty(2, 3)))
    assert mode.seen[:1] == ["cudal2.linear.default"] and "cudal2.matmul.default" in mode.seen
    assert "cudal2.matmul.out" in mode.seen
    torch.testing.assert_close(got[0], F.linear(x, w, b))
    _LoggingTensor.seen = []
    cudal2_ops.linear(_LoggingTensor(x), w)
    assert _LoggingTensor.seen[:1] == ["cudal2.linear.default"]


@needs_ext
def test_torch_function_subclass_sees_the_op():
    class Traced(torch.Tensor):
        calls = []

        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            cls.calls.append(str(func))
            return super().__torch_function__(func, types, args, kwargs or {})

    x = torch.randn(2, 8).as_subclass(Traced)
    cudal2_ops.linear(x, torch.randn(3, 8))
    assert Traced.calls[:1] == ["cudal2.linear.default"]


@needs_ext
def test_profiler_records_the_direct_call():
    x, w = torch.randn(2, 8), torch.randn(3, 8)
    with torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU]) as prof:
        cudal2_ops.linear(x, w)
        cudal2_ops.matmul(x, w.t())
    names = {event.name for event in prof.events()}
    assert {"cudal2::linear", "cudal2::matmul"} <= names


@needs_ext
def test_cpp_warnings_reach_python_warning_filters():
    """torch's warning about resizing a non-empty out= tensor is a Python UserWarning, as from torch.matmul."""
    a, b = torch.randn(3, 4), torch.randn(4, 5)
    with pytest.warns(UserWarning, match="resized"):
        cudal2_ops.matmul(a, b, out=torch.empty(2, 2))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(UserWarning, match="resized"):
            cudal2_ops.matmul(a, b, out=torch.empty(2, 2))
