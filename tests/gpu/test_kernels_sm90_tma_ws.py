"""GPU tests of the `sm90_tma_ws` kernels of a built kernel library ($CUDAL2_TEST_KERNEL_LIB, else the one the build
installed beside cudal2_ops; an sm_90 run with neither fails at collection).

Each kernel of the family that runs on the visible GPU is checked for: accuracy on randn inputs against an fp32
reference, bit-exact fp32 accumulation (0/1 inputs, sums above 2048), every output written (NaN-poisoned outputs),
no writes outside D (padded leading dimension), fused bias with and without, odd shapes (run correctly or rejected
for alignment only), runtime knobs, workspace checks, and bitwise determinism.
"""
from __future__ import annotations

import zlib

import pytest
import torch

from cudal2_testing.kernel_library import Kernel, KernelLibrary
from kernel_lib_under_test import library_under_test

FAMILY = "sm90_tma_ws"
if not torch.cuda.is_available() or torch.cuda.get_device_capability() != (9, 0):
    pytest.skip("sm90_tma_ws kernels need an sm_90 GPU", allow_module_level=True)

LIBRARY = KernelLibrary(library_under_test())
KERNELS = {n: k for n, k in LIBRARY.runnable_on().items() if k.family == FAMILY}
NAMES = sorted(KERNELS)
REL_TOL = {torch.float16: 1e-3, torch.bfloat16: 8e-3}
ODD = (1, 7, 8, 65, 1000, 4097)


@pytest.fixture(params=NAMES)
def kernel(request) -> Kernel:
    return KERNELS[request.param]


def operands(kernel: Kernel, m: int, n: int, k: int, bias: bool, gen: torch.Generator):
    """randn A [M, K], B in the kernel's layout, optional bias [N], all on the GPU in the kernel's dtype."""
    def randn(*shape):
        return torch.randn(*shape, generator=gen, device="cuda", dtype=torch.float32).to(kernel.dtype)
    a = randn(m, k)
    b = randn(k, n) if kernel.layout == "nn" else randn(n, k)
    return a, b, (randn(n) if bias else None)


def reference(kernel: Kernel, a, b, bias) -> torch.Tensor:
    """fp32 reference of a @ op(b) + bias."""
    bk = b.float() if kernel.layout == "nn" else b.float().t()
    out = a.float() @ bk
    return out + bias.float() if bias is not None else out


def accepts(kernel: Kernel, a, b, out, bias=None, **knobs) -> bool:
    return kernel.can_implement(kernel.problem(a, b, out, bias, **knobs))


def assert_close(kernel: Kernel, out, ref) -> None:
    assert not torch.isnan(out).any(), "NaN in the output (an element was not written)"
    err = (out.float() - ref).norm() / ref.norm().clamp_min(1e-30)
    assert err <= REL_TOL[kernel.dtype], f"relative error {err:.3e}"


@pytest.mark.parametrize("bias", [False, True])
@pytest.mark.parametrize("shape", [(256, 512, 384), (1000, 1024, 4096), (4096, 4096, 1024)])
def test_randn(kernel: Kernel, shape, bias) -> None:
    gen = torch.Generator(device="cuda").manual_seed(zlib.crc32(f"{kernel.name}{shape}{bias}".encode()))
    a, b, bvec = operands(kernel, *shape, bias, gen)
    out = torch.full((shape[0], shape[1]), float("nan"), device="cuda", dtype=kernel.dtype)
    kernel.run(a, b, bvec, out=out)
    assert_close(kernel, out, reference(kernel, a, b, bvec))


@pytest.mark.parametrize("bias", [False, True])
def test_exact_integers(kernel: Kernel, bias: bool) -> None:
    """0/1 inputs with K=4096, density 0.7: with fp32 accumulation every output is dtype(round(exact)) bit for bit."""
    gen = torch.Generator(device="cuda").manual_seed(7)
    m, n, k = 256, 512, 4096
    a = (torch.rand(m, k, generator=gen, device="cuda") < 0.7).to(kernel.dtype)
    bkn = (torch.rand(k, n, generator=gen, device="cuda") < 0.7).to(kernel.dtype)
    b = bkn if kernel.layout == "nn" else bkn.t().contiguous()
    bvec = torch.randint(0, 4, (n,), generator=gen, device="cuda").to(kernel.dtype) if bias else None
    exact = a.double() @ bkn.double() + (bvec.double() if bias else 0)
    assert exact.max() > 2048, "the test must exercise sums above 2048"
    out = kernel.run(a, b, bvec)
    expected = exact.to(kernel.dtype)
    assert torch.equal(out, expected), f"{(out != expected).sum().item()} mismatches"


def test_odd_shapes_acceptance(kernel: Kernel) -> None:
    """Every M is accepted; N and K exactly when they are multiples of 8 (TMA's 16-byte alignment)."""
    for m in ODD:
        for n in ODD:
            for k in ODD:
                a = torch.empty(m, k, device="cuda", dtype=kernel.dtype)
                b = torch.empty(*((k, n) if kernel.layout == "nn" else (n, k)), device="cuda", dtype=kernel.dtype)
                out = torch.empty(m, n, device="cuda", dtype=kernel.dtype)
                ok = accepts(kernel, a, b, out)
                assert ok == (n % 8 == 0 and k % 8 == 0), f"can_implement={ok} for M={m} N={n} K={k}"


@pytest.mark.parametrize("m", ODD)
@pytest.mark.parametrize("n, k", [(8, 8), (8, 1000), (1000, 8), (1000, 1000), (4104, 520), (520, 4104)])
def test_odd_shapes_run(kernel: Kernel, m: int, n: int, k: int) -> None:
    """Shapes with tile residues in every dimension are computed right and write every output element."""
    gen = torch.Generator(device="cuda").manual_seed(m * 1_000_003 + n * 1009 + k)
    a, b, bvec = operands(kernel, m, n, k, True, gen)
    out = torch.full((m, n), float("nan"), device="cuda", dtype=kernel.dtype)
    kernel.run(a, b, bvec, out=out)
    assert_close(kernel, out, reference(kernel, a, b, bvec))


def test_padded_leading_dims_untouched(kernel: Kernel) -> None:
    """Views with padded rows: results right, and the padding of D (and around it) stays as it was."""
    m, n, k, pad = 333, 264, 520, 24
    gen = torch.Generator(device="cuda").manual_seed(3)
    a_full, b_full, bvec = operands(kernel, m, n + pad, k + pad, True, gen)
    a = a_full[:, :k]
    b = b_full[:k, :n] if kernel.layout == "nn" else b_full[:n, :k]
    bvec = bvec[:n]
    d_full = torch.full((m + 2, n + pad), float("nan"), device="cuda", dtype=kernel.dtype)
    out = d_full[1:m + 1, :n]
    kernel.run(a, b, bvec, out=out)
    assert_close(kernel, out, reference(kernel, a, b, bvec))
    assert torch.isnan(d_full[:, n:]).all() and torch.isnan(d_full[0]).all() and torch.isnan(d_full[-1]).all()


def test_misaligned_rejected(kernel: Kernel) -> None:
    """Pointers off 16-byte alignment or leading dims not multiples of 8 are rejected (the dispatcher falls back)."""
    m, n, k = 64, 128, 64
    gen = torch.Generator(device="cuda").manual_seed(5)
    a_wide, b, bias_long = operands(kernel, m, n + 8, k + 8, True, gen)
    b = b[:k, :n] if kernel.layout == "nn" else b[:n, :k]
    a_ld68 = a_wide[:, :k + 4].contiguous()[:, :k]
    out = torch.empty(m, n, device="cuda", dtype=kernel.dtype)
    assert accepts(kernel, a_wide[:, :k], b, out, bias_long[:n])
    assert not accepts(kernel, a_wide[:, 1:k + 1], b, out), "A pointer off 16-byte alignment"
    assert not accepts(kernel, a_ld68, b, out), "lda not a multiple of 8"
    assert not accepts(kernel, a_wide[:, :k], b, out, bias_long[1:n + 1]), "bias pointer off 16-byte alignment"


@pytest.mark.parametrize("knobs", [dict(raster=1), dict(raster=2), dict(swizzle=2), dict(swizzle=4, raster=1),
                                   dict(splits=1), dict(splits=3), dict(splits=4, raster=2)])
def test_knobs_and_determinism(kernel: Kernel, knobs) -> None:
    """Runtime knobs keep results right; two runs of one problem are bitwise equal."""
    m, n, k = 520, 1032, 8200
    gen = torch.Generator(device="cuda").manual_seed(11)
    a, b, bvec = operands(kernel, m, n, k, True, gen)
    first = kernel.run(a, b, bvec, **knobs)
    assert_close(kernel, first, reference(kernel, a, b, bvec))
    for _ in range(2):
        again = torch.full_like(first, float("nan"))
        kernel.run(a, b, bvec, out=again, **knobs)
        assert torch.equal(first, again), "results differ between runs"


def test_workspace_too_small(kernel: Kernel) -> None:
    """A kernel that needs workspace refuses a short one instead of running."""
    gen = torch.Generator(device="cuda").manual_seed(13)
    a, b, _ = operands(kernel, 256, 256, 8192, False, gen)
    out = torch.empty(256, 256, device="cuda", dtype=kernel.dtype)
    p = kernel.problem(a, b, out, splits=4)
    need = kernel.workspace_size(p)
    if need == 0:
        pytest.skip("no workspace needed")
    ws = torch.empty(need, dtype=torch.uint8, device="cuda")
    short = kernel.problem(a, b, out, splits=4, workspace=ws[: need - 1])
    assert kernel.launch(short) == 2
