"""GPU tests of the sm80_cute kernels through the torch-free kernel library (cudal2_testing.kernel_library).

The library is $CUDAL2_TEST_KERNEL_LIB, e.g. built with
`python -m build_tools.kernel_lib --names $(ls kernels/sm80 | grep sm80_cute | sed s/.cu//) --out libk.so --archs 9.0`,
else the one the build installed beside cudal2_ops; a GPU run with neither fails.
Besides the default set, VARIANT_NAMES exercise code paths the defaults do not (1- and 2-warp tiles with 16- and
32-wide N-major atoms), and sm80_cute.CODE_VARIANTS each off-default code-level value (register pipeline 1 and 3,
cp.async prefetch 1..4, staggered A/B copies, the epilogue from registers, tiles of 48, 96 and 160); build them with
`python -m cudal2_catalog.codegen --names ...` first, or as the candidates stage does:
CANDIDATES=$(python -c "from cudal2_catalog.families.sm80_cute import CODE_VARIANTS; print(','.join(CODE_VARIANTS))")
scripts/gpu_check.sh OUT candidates. Kernels missing from the library are skipped.
"""
from __future__ import annotations


import pytest
import torch

from cudal2_testing.correctness import all_passed, run_checks, summarize
from cudal2_testing.correctness.kernel_impl import KernelImpl
from cudal2_testing.kernel_library import Kernel, KernelError, KernelLibrary
from kernel_lib_under_test import library_under_test
from cudal2_catalog.families import sm80_cute

VARIANT_NAMES = ["sm80_cute_fp16_nn_16x32x32_s4_w1", "sm80_cute_bf16_nt_16x16x64_s4_w1",
                 "sm80_cute_fp16_nn_16x64x64_s3_w2", "sm80_cute_fp16_nt_64x32x64_s3_w4"]
NAMES = [cfg.name for cfg in sm80_cute.default_configs()] + VARIANT_NAMES + list(sm80_cute.CODE_VARIANTS)
TOL = {torch.float16: 1e-3, torch.bfloat16: 8e-3}
STATUS_WORKSPACE_TOO_SMALL = 2


@pytest.fixture(scope="module")
def kernels() -> dict[str, Kernel]:
    lib = KernelLibrary(library_under_test())
    found = {n: k for n, k in lib.runnable_on().items() if k.family == "sm80_cute"}
    if not found:
        pytest.skip("no sm80_cute kernel in the library runs on this GPU")
    return found


def get(kernels: dict[str, Kernel], name: str) -> Kernel:
    if name not in kernels:
        pytest.skip(f"{name} not in the library")
    return kernels[name]


def padded(rows: int, cols: int, dtype: torch.dtype, fill: torch.Tensor | None = None) -> torch.Tensor:
    """A [rows, cols] view with row stride round_up(cols, 8) whose padding holds NaN (reading it would show)."""
    storage = torch.full((rows, (cols + 7) // 8 * 8), float("nan"), dtype=dtype, device="cuda")
    view = storage[:, :cols]
    view.copy_(fill if fill is not None else torch.randn(rows, cols, device="cuda"))
    return view


def operands(k: Kernel, m: int, n: int, kk: int, pad: bool = True) -> tuple[torch.Tensor, torch.Tensor]:
    """A [m, kk] and B ([kk, n] for nn, [n, kk] for nt), with NaN-filled row padding when `pad`."""
    b_shape = (kk, n) if k.layout == "nn" else (n, kk)
    if pad:
        return padded(m, kk, k.dtype), padded(*b_shape, k.dtype)
    return (torch.randn(m, kk, device="cuda").to(k.dtype), torch.randn(*b_shape, device="cuda").to(k.dtype))


def run(k: Kernel, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None, **knobs) -> torch.Tensor:
    """Runs `k` into a NaN-filled output whose row stride is padded to 8 (so any N is accepted)."""
    n = b.shape[1] if k.layout == "nn" else b.shape[0]
    out = padded(a.shape[0], n, k.dtype, torch.zeros(a.shape[0], n))
    out.fill_(float("nan"))
    return k.run(a, b, bias, out=out, **knobs)


def reference(k: Kernel, a: torch.Tensor, b: torch.Tensor, bias: torch.Tensor | None = None) -> torch.Tensor:
    """fp32 reference of a @ op(b) (+ bias)."""
    bf = b.float() if k.layout == "nn" else b.float().t()
    out = a.float() @ bf
    return out + bias.float() if bias is not None else out


def check_close(k: Kernel, out: torch.Tensor, ref: torch.Tensor) -> None:
    assert not torch.isnan(out).any(), "NaN in the output"
    err = ((out.float() - ref).norm() / ref.norm().clamp_min(1e-12)).item()
    assert err <= TOL[k.dtype], f"{k.name}: relative error {err:.2e} > {TOL[k.dtype]:.0e}"


@pytest.fixture(autouse=True)
def deterministic_reference():
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.manual_seed(0)


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("with_bias", [False, True])
def test_randn(kernels, name, with_bias):
    k = get(kernels, name)
    for m, n, kk in ((128, 128, 128), (256, 384, 512), (192, 320, 96)):
        a, b = operands(k, m, n, kk, pad=False)
        bias = torch.randn(n, device="cuda").to(k.dtype) if with_bias else None
        check_close(k, k.run(a, b, bias), reference(k, a, b, bias))


ODD_SHAPES = [(1, 1, 1), (7, 65, 1000), (65, 1000, 7), (1000, 7, 65), (4097, 65, 129), (1, 4097, 4097),
              (63, 127, 1023), (129, 200, 33)]


@pytest.mark.parametrize("name", NAMES)
def test_odd_shapes_padded(kernels, name):
    """Residues in M, N, K with leading dimensions padded to 8 (NaN padding must never be read)."""
    k = get(kernels, name)
    for m, n, kk in ODD_SHAPES:
        a, b = operands(k, m, n, kk)
        bias = torch.randn(n, device="cuda").to(k.dtype)
        out = run(k, a, b, bias)
        check_close(k, out, reference(k, a, b, bias))
        assert torch.isnan(out.as_strided((m, out.stride(0)), out.stride())[:, n:]).all(), "wrote past N"


@pytest.mark.parametrize("name", NAMES[:6])
def test_tight_odd_shapes_rejected_or_right(kernels, name):
    """Unpadded operands: misaligned rows are rejected by can_implement; accepted ones are right."""
    k = get(kernels, name)
    for m, n, kk in ((7, 65, 1000), (65, 8, 16), (3, 1023, 12289), (16, 16, 15)):
        a, b = operands(k, m, n, kk, pad=False)
        out = torch.empty(m, n, dtype=k.dtype, device="cuda")
        aligned = all(x % 8 == 0 for x in (a.stride(0), b.stride(0), out.stride(0)))
        assert k.can_implement(k.problem(a, b, out)) == aligned
        if aligned:
            check_close(k, k.run(a, b, out=out), reference(k, a, b))


@pytest.mark.parametrize("name", NAMES)
def test_exact_integers(kernels, name):
    """0/1 inputs, K=4096, density 0.7: fp32 accumulation gives dtype(exact) bit for bit (row sums > 2048)."""
    k = get(kernels, name)
    m, n, kk = 96, 200, 4096
    a = (torch.rand(m, kk, device="cuda") < 0.7).to(k.dtype)
    b_shape = (kk, n) if k.layout == "nn" else (n, kk)
    b = (torch.rand(*b_shape, device="cuda") < 0.7).to(k.dtype)
    bd = b.double() if k.layout == "nn" else b.double().t()
    exact = a.double() @ bd
    assert exact.max() > 2048
    expected = exact.to(k.dtype)
    for splits in (0, 3, 16):  # sm_90: 3 parts reduce in a cluster, 16 through the workspace
        out = run(k, a, b, splits=splits)
        assert torch.equal(out, expected), f"splits={splits}: {(out != expected).sum().item()} mismatches"


@pytest.mark.parametrize("name", NAMES)
def test_nan_poisoned_output(kernels, name):
    k = get(kernels, name)
    for splits in (0, 2):
        a, b = operands(k, 130, 250, 300)
        out = run(k, a, b, splits=splits)
        assert not torch.isnan(out).any()


@pytest.mark.parametrize("name", NAMES)
@pytest.mark.parametrize("splits", [2, 3, 7, 1000])
def test_split_k(kernels, name, splits):
    k = get(kernels, name)
    a, b = operands(k, 100, 300, 1000)
    bias = torch.randn(300, device="cuda").to(k.dtype)
    first = run(k, a, b, bias, splits=splits)
    check_close(k, first, reference(k, a, b, bias))
    for _ in range(3):
        assert torch.equal(run(k, a, b, bias, splits=splits), first), "split-K is not deterministic"


def test_workspace_checked(kernels):
    """Split-K through the workspace (more parts than a cluster reduces, or any split before sm_90) needs it; the
    cluster reduction (2..8 parts on sm_90) and no split need none."""
    k = get(kernels, NAMES[0])
    a, b = operands(k, 64, 64, 8192, pad=False)
    out = torch.empty(64, 64, dtype=k.dtype, device="cuda")
    p = k.problem(a, b, out, splits=16)
    assert k.workspace_size(p) > 0
    assert k.launch(p) == STATUS_WORKSPACE_TOO_SMALL
    assert k.workspace_size(k.problem(a, b, out, splits=1)) == 0
    cluster = torch.cuda.get_device_capability()[0] >= 9
    assert (k.workspace_size(k.problem(a, b, out, splits=4)) == 0) == cluster
    # automatic (splits = 0): one 64 x 64 output tile leaves SMs idle, so K is split in more than 8 parts
    assert k.workspace_size(k.problem(a, b, out)) > 0


@pytest.mark.parametrize("name", NAMES)
def test_swizzle_and_raster_bitwise_equal(kernels, name):
    """CTA order only moves tiles between CTAs: every swizzle/raster gives the same bits."""
    k = get(kernels, name)
    a, b = operands(k, 700, 900, 256)
    base = run(k, a, b)
    check_close(k, base, reference(k, a, b))
    for swizzle in (1, 2, 3, 8, 1000):
        for raster in (0, 1, 2):
            assert torch.equal(run(k, a, b, swizzle=swizzle, raster=raster), base), (swizzle, raster)


@pytest.mark.parametrize("name", NAMES[:3] + NAMES[9:])
def test_deterministic_and_graph_capturable(kernels, name):
    k = get(kernels, name)
    a, b = operands(k, 333, 517, 2049)
    first = run(k, a, b)
    out = run(k, a, b)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        k.run(a, b, out=out)
    for _ in range(3):
        out.zero_()
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(out, first)


def test_misaligned_pointer_rejected(kernels):
    k = get(kernels, NAMES[0])
    storage = torch.randn(64, 136, device="cuda").to(k.dtype)
    a = storage[:, 1:129]  # 2-byte offset: not 16-byte aligned
    b = torch.randn(128, 64, device="cuda").to(k.dtype)
    out = torch.empty(64, 64, dtype=k.dtype, device="cuda")
    assert not k.can_implement(k.problem(a, b, out))
    with pytest.raises(KernelError):
        k.run(a, b, out=out)


# The harness checks an sm80_cute kernel can pass ("layouts" breaks the 16-byte alignment it requires on purpose).
HARNESS_CHECKS = ("random", "exact", "exact_small_k", "guards", "determinism", "stream", "graph")
# Residues in M, N and K against every tile (N and K multiples of 8: sm80_cute needs 16-byte aligned rows of A, B
# and D, and declines other problems), one full-tile problem, a long K.
HARNESS_SHAPES = [(128, 256, 512), (97, 200, 520), (161, 104, 72), (7, 72, 1000), (33, 160, 4104)]


@pytest.mark.parametrize("name", sm80_cute.CODE_VARIANTS)
@pytest.mark.parametrize("with_bias", [False, True])
@pytest.mark.parametrize("splits", [0, 1, 3, 16])
def test_code_variants_pass_the_harness(kernels, name, with_bias, splits):
    """Every code-level variant through the full correctness harness (random against the fp32 reference, exact
    integers, NaN-poisoned outputs with guard bands, determinism, the caller's stream, graph capture), unsplit and
    split in a cluster (3) and through the workspace (16)."""
    k = get(kernels, name)
    results = run_checks(KernelImpl(k, splits=splits), HARNESS_SHAPES, k.layout, k.dtype, with_bias=with_bias,
                         checks=HARNESS_CHECKS)
    assert all_passed(results), f"{name} splits={splits}:\n{summarize(results)}"
