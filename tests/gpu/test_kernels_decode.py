"""GPU tests of the `decode` kernel family (M <= 64), run through the torch-free kernel library.

The library is $CUDAL2_TEST_KERNEL_LIB (e.g. python -m build_tools.kernel_lib --names decode_... --out lib.so), else
the one the build installed (cudal2_ops/libcudal2_kernels.so); a GPU run with neither fails. The family's
cold-weight bandwidth on the LLM decode shapes is a benchmark: python -m benchmarks.decode_bandwidth.
"""
from __future__ import annotations

import math

import pytest
import torch

from cudal2_testing.kernel_library import Kernel, KernelLibrary, Problem
from dependent_launch import assert_chain_sees_preceding_writes
from kernel_lib_under_test import library_under_test
from cudal2_catalog.config import config_of
from cudal2_catalog.families import decode

TOLERANCE = {torch.float16: 1e-3, torch.bfloat16: 8e-3}


@pytest.fixture(scope="module")
def kernels() -> dict[str, Kernel]:
    path = library_under_test()
    found = {n: k for n, k in KernelLibrary(path).runnable_on().items() if k.family == "decode"}
    if not found:
        pytest.skip(f"no decode kernel in {path} runs on this GPU")
    return found


def tile_m(kernel: Kernel) -> int:
    """The largest M the kernel handles (from its name)."""
    return int(kernel.name.split("_")[3].split("x")[0])


def pick(kernels: dict[str, Kernel], dtype: torch.dtype, layout: str, m: int) -> Kernel:
    """The default-set kernel (any kernel if the library has none) with the smallest tile_m >= m."""
    defaults = {c.name for c in decode.default_configs()}
    pool = [k for k in kernels.values() if k.name in defaults] or list(kernels.values())
    fits = [k for k in pool if k.dtype == dtype and k.layout == layout and tile_m(k) >= m]
    if not fits:
        pytest.skip(f"no {layout} {dtype} decode kernel for M={m}")
    return min(fits, key=tile_m)


def make_inputs(m: int, n: int, k: int, dtype: torch.dtype, layout: str, gen: torch.Generator):
    """a [M, K] and b ([N, K] for nt, [K, N] for nn), randn scaled to unit-size outputs."""
    a = torch.randn(m, k, generator=gen, device="cuda").to(dtype)
    shape = (n, k) if layout == "nt" else (k, n)
    b = (torch.randn(*shape, generator=gen, device="cuda") / math.sqrt(k)).to(dtype)
    return a, b


def reference(a: torch.Tensor, b: torch.Tensor, layout: str, bias: torch.Tensor | None) -> torch.Tensor:
    """fp32 reference of a @ op(b) + bias."""
    w = b.float().t() if layout == "nt" else b.float()
    out = a.float() @ w
    return out + bias.float() if bias is not None else out


def rel_error(out: torch.Tensor, ref: torch.Tensor) -> float:
    return ((out.float() - ref).norm() / ref.norm().clamp_min(1e-30)).item()


def run_poisoned(kernel: Kernel, a, b, bias=None, splits=0) -> torch.Tensor:
    """Runs with a NaN-poisoned output; asserts every output element was written."""
    n = b.shape[0] if kernel.layout == "nt" else b.shape[1]
    out = torch.full((a.shape[0], n), float("nan"), dtype=a.dtype, device="cuda")
    kernel.run(a, b, bias, out=out, splits=splits)
    assert not out.isnan().any(), f"{kernel.name}: output elements left unwritten"
    return out


CASES = [  # (M, N, K): residues in N and K, a single K tile, tiny and large N
    (1, 4096, 4096), (3, 1001, 1032), (7, 67, 8), (5, 136, 4104), (8, 520, 200)]


@pytest.mark.parametrize("layout", ["nt", "nn"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("with_bias", [False, True])
def test_randn_against_fp32(kernels, layout, dtype, with_bias):
    gen = torch.Generator(device="cuda").manual_seed(0)
    for kernel in [k for k in kernels.values() if k.dtype == dtype and k.layout == layout]:
        for m0, n, k in CASES:
            if layout == "nn" and n % 8:
                n += 8 - n % 8
            for m in sorted({min(m0, tile_m(kernel)), tile_m(kernel), max(1, tile_m(kernel) - 3)}):
                a, b = make_inputs(m, n, k, dtype, layout, gen)
                bias = torch.randn(n, generator=gen, device="cuda").to(dtype) if with_bias else None
                out = run_poisoned(kernel, a, b, bias)
                err = rel_error(out, reference(a, b, layout, bias))
                assert err <= TOLERANCE[dtype], f"{kernel.name} M={m} N={n} K={k}: rel error {err:.2e}"


@pytest.mark.parametrize("layout", ["nt", "nn"])
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("splits", [0, 1, 3, 32])
def test_exact_integers(kernels, layout, dtype, splits):
    """0/1 inputs with row sums above 2048: fp32 accumulation gives round(exact) bit for bit."""
    gen = torch.Generator(device="cuda").manual_seed(1)
    m, n, k = 64, 264, 4096
    for kernel in [x for x in kernels.values() if x.dtype == dtype and x.layout == layout]:
        mm = min(m, tile_m(kernel))
        a = (torch.rand(mm, k, generator=gen, device="cuda") < 0.7).to(dtype)
        shape = (n, k) if layout == "nt" else (k, n)
        b = (torch.rand(*shape, generator=gen, device="cuda") < 0.7).to(dtype)
        exact = a.double() @ (b.double().t() if layout == "nt" else b.double())
        assert exact.max().item() > 2048
        out = run_poisoned(kernel, a, b, splits=splits)
        assert torch.equal(out, exact.to(dtype)), f"{kernel.name} splits={splits}: not bitwise exact"


# (N, K) for the automatic split (splits = 0): many and few n tiles, K residues, a single K tile (no reduction).
AUTO_SPLIT_CASES = [(14336, 1024), (4104, 4104), (20000, 256), (520, 3592), (328, 200), (3000, 64)]


@pytest.mark.parametrize("n,k", AUTO_SPLIT_CASES)
def test_automatic_split_exact_integers(kernels, n, k):
    """0/1 inputs (and integer bias) with the automatic split: a K tile summed twice or missed changes the result."""
    gen = torch.Generator(device="cuda").manual_seed(7)
    for kernel in kernels.values():
        if kernel.layout == "nn" and n % 8:
            continue
        m = min(3, tile_m(kernel))
        a = (torch.rand(m, k, generator=gen, device="cuda") < 0.5).to(kernel.dtype)
        shape = (n, k) if kernel.layout == "nt" else (k, n)
        b = (torch.rand(*shape, generator=gen, device="cuda") < 0.5).to(kernel.dtype)
        bias = torch.randint(-4, 5, (n,), generator=gen, device="cuda").to(kernel.dtype)
        exact = a.double() @ (b.double().t() if kernel.layout == "nt" else b.double()) + bias.double()
        out = run_poisoned(kernel, a, b, bias, splits=0)
        assert torch.equal(out, exact.to(kernel.dtype)), f"{kernel.name} N={n} K={k}: automatic split not exact"


@pytest.mark.parametrize("splits", [1, 2, 5, 7, 64, 10**6])
def test_split_counts(kernels, splits):
    gen = torch.Generator(device="cuda").manual_seed(2)
    for kernel in kernels.values():
        m = tile_m(kernel)
        a, b = make_inputs(m, 328, 1800, kernel.dtype, kernel.layout, gen)
        bias = torch.randn(328, generator=gen, device="cuda").to(kernel.dtype)
        err = rel_error(run_poisoned(kernel, a, b, bias, splits), reference(a, b, kernel.layout, bias))
        assert err <= TOLERANCE[kernel.dtype], f"{kernel.name} splits={splits}: rel error {err:.2e}"


def test_every_m(kernels):
    """M from 1 to 64 with the fitting NT/NN fp16 kernel."""
    gen = torch.Generator(device="cuda").manual_seed(3)
    for layout in ("nt", "nn"):
        for m in range(1, 65):
            kernel = pick(kernels, torch.float16, layout, m)
            a, b = make_inputs(m, 200, 520, torch.float16, layout, gen)
            err = rel_error(run_poisoned(kernel, a, b), reference(a, b, layout, None))
            assert err <= TOLERANCE[torch.float16], f"{kernel.name} M={m}: rel error {err:.2e}"


def test_deterministic(kernels):
    gen = torch.Generator(device="cuda").manual_seed(4)
    for kernel in kernels.values():
        a, b = make_inputs(tile_m(kernel), 1024, 4096, kernel.dtype, kernel.layout, gen)
        first = kernel.run(a, b)
        for _ in range(3):
            assert torch.equal(kernel.run(a, b), first), f"{kernel.name}: results differ between runs"


def test_strided_output_untouched_padding(kernels):
    """ldd > N: the padding columns of D keep their sentinel (no out-of-bounds writes)."""
    gen = torch.Generator(device="cuda").manual_seed(5)
    for kernel in kernels.values():
        m, n, k = tile_m(kernel), 136, 1024
        a, b = make_inputs(m, n, k, kernel.dtype, kernel.layout, gen)
        store = torch.full((m, n + 24), 7.0, dtype=kernel.dtype, device="cuda")
        out = store[:, :n]
        kernel.run(a, b, out=out, splits=3)
        assert torch.all(store[:, n:] == 7.0), f"{kernel.name}: wrote outside D"
        assert rel_error(out, reference(a, b, kernel.layout, None)) <= TOLERANCE[kernel.dtype]


def test_rejects_unsupported(kernels):
    """M above tile_m, K % 8 != 0 (and N % 8 != 0 for NN), misaligned A are refused by can_implement."""
    for kernel in kernels.values():
        dt, tm = kernel.dtype, tile_m(kernel)
        n, k = 64, 64
        b = torch.zeros((n, k) if kernel.layout == "nt" else (k, n), dtype=dt, device="cuda")
        out = torch.empty(tm + 1, n, dtype=dt, device="cuda")
        assert not kernel.can_implement(kernel.problem(torch.zeros(tm + 1, k, dtype=dt, device="cuda"), b, out))
        a_odd = torch.zeros(2, k + 8, dtype=dt, device="cuda")[:, 1:k + 1]
        assert not kernel.can_implement(kernel.problem(a_odd, b, out[:2]))
        k_odd = 60
        b2 = torch.zeros((n, k_odd) if kernel.layout == "nt" else (k_odd, n), dtype=dt, device="cuda")
        assert not kernel.can_implement(kernel.problem(torch.zeros(2, k_odd, dtype=dt, device="cuda"), b2, out[:2]))


@pytest.mark.parametrize("splits", [0, 4])
def test_cuda_graph_replay(kernels, splits):
    """Captured in a CUDA graph (split-K with its reduction kernel, or as clusters on sm_90), replays give the eager
    result bit for bit."""
    gen = torch.Generator(device="cuda").manual_seed(6)
    kernel = pick(kernels, torch.float16, "nt", 8)
    a, b = make_inputs(8, 512, 3584, torch.float16, "nt", gen)
    eager = kernel.run(a, b, splits=splits)
    bench = _Launcher(kernel, a, b, torch.empty_like(eager), splits=splits)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        bench()
    for _ in range(3):
        bench.out.fill_(float("nan"))
        graph.replay()
        torch.cuda.synchronize()
        assert torch.equal(bench.out, eager)


@pytest.mark.parametrize("splits", [1, 4, 16])
def test_programmatic_launch_sees_preceding_writes(kernels, splits):
    """Enqueued back to back without syncs (programmatic dependent launch on sm_90: each GEMM prefetches its weight
    into L2 before waiting for the preceding kernel), every GEMM sees what the kernel just before it wrote: a copy
    kernel overwrites the weight before the first GEMM, and the second GEMM reads the first one's output. Sparse 0/1
    inputs keep every value an integer below 2048: results are exact."""
    assert_chain_sees_preceding_writes(pick(kernels, torch.float16, "nt", 8), 8, 1024, splits)


def weight_stream(kernel: Kernel) -> str:
    """The kernel's weight stream ("" = cp.async, "evictfirst", "tma"), from its name."""
    cfg = config_of(kernel.name)
    return cfg.weight_stream if cfg is not None else ""


def bits(shape, dtype, gen, density=0.5) -> torch.Tensor:
    """Random 0/1 values: sums of products stay exact integers in fp32."""
    return (torch.rand(*shape, generator=gen, device="cuda") < density).to(dtype)


def exact_product(a: torch.Tensor, b: torch.Tensor, layout: str) -> torch.Tensor:
    """a @ op(b) in float64, rounded to a's dtype."""
    return (a.double() @ (b.double().t() if layout == "nt" else b.double())).to(a.dtype)


def test_weight_views_and_the_tensor_map_cache(kernels):
    """Every kernel (for TMA ones: the per-weight tensor-map cache) on weights seen one after the other: a strided
    view (ldb > row length) whose base is 16 but not 128-byte aligned, then the same base pointer and shape with
    another ldb, then another weight of the same shape. A map reused for the wrong ldb or pointer breaks exactness."""
    gen = torch.Generator(device="cuda").manual_seed(11)
    m, n, k = 5, 200, 1032
    for kernel in kernels.values():
        mm = min(m, tile_m(kernel))
        a = bits((mm, k), kernel.dtype, gen)
        rows, cols = (n, k) if kernel.layout == "nt" else (k, n)
        store = bits((rows, cols + 72), kernel.dtype, gen)
        narrow = store.view(-1)[8:8 + rows * (cols + 8)].view(rows, cols + 8)  # same base + 16 bytes, ldb = cols + 8
        for b in (store[:, 8:8 + cols], narrow[:, :cols], bits((rows, cols), kernel.dtype, gen)):
            out = run_poisoned(kernel, a, b, splits=0)
            assert torch.equal(out, exact_product(a, b, kernel.layout)), f"{kernel.name} ldb={b.stride(0)}"


def test_rejects_misaligned_weight(kernels):
    """A weight whose base or row stride is not a multiple of 16 bytes is refused (TMA and cp.async alike)."""
    for kernel in kernels.values():
        dt, n, k = kernel.dtype, 64, 64
        rows, cols = (n, k) if kernel.layout == "nt" else (k, n)
        a, out = torch.zeros(2, k, dtype=dt, device="cuda"), torch.empty(2, n, dtype=dt, device="cuda")
        shifted = torch.zeros(rows, cols + 8, dtype=dt, device="cuda")[:, 1:cols + 1]
        odd_ld = torch.zeros(rows, cols + 3, dtype=dt, device="cuda")[:, :cols]
        for b in (shifted, odd_ld):
            assert not kernel.can_implement(kernel.problem(a, b, out)), f"{kernel.name} ldb={b.stride(0)}"


@pytest.mark.parametrize("splits", [1, 3])
def test_weight_streams_agree_bitwise(kernels, splits):
    """Kernels of one tile differing only in their weight stream compute the same sums in the same order at a given
    split count: equal bit for bit on random inputs with bias (odd N and K residues). Not at splits=0: the automatic
    count fills one resident wave, and the streams' shared memory (hence CTAs per SM) differs (on an H100 the 8x128x64
    TMA and evict-first kernels chose different counts), so their sums differ in order, each within the harness's
    tolerance."""
    groups: dict[str, list[Kernel]] = {}
    for kernel in kernels.values():
        stream = weight_stream(kernel)
        base = kernel.name[:-len(stream) - 1] if stream else kernel.name
        groups.setdefault(base, []).append(kernel)
    pairs = [g for g in groups.values() if len(g) > 1]
    if not pairs:
        pytest.skip("no two kernels of one tile with different weight streams in the library")
    gen = torch.Generator(device="cuda").manual_seed(12)
    for group in pairs:
        first = group[0]
        n = 1001 if first.layout == "nt" else 1000  # NN needs N % 8 == 0
        a, b = make_inputs(tile_m(first) - 1, n, 3080, first.dtype, first.layout, gen)
        bias = torch.randn(n, generator=gen, device="cuda").to(first.dtype)
        want = run_poisoned(first, a, b, bias, splits)
        for other in group[1:]:
            assert torch.equal(run_poisoned(other, a, b, bias, splits), want), f"{other.name} != {first.name}"


class _Launcher:
    """Launches one kernel on fixed tensors with a preallocated workspace (no allocation per call)."""

    def __init__(self, kernel: Kernel, a, b, out, splits: int = 0) -> None:
        self.kernel, self.a, self.b, self.out, self.splits = kernel, a, b, out, splits
        probe = kernel.problem(a, b, out, splits=splits)
        assert kernel.can_implement(probe), f"{kernel.name} refuses M={probe.m} N={probe.n} K={probe.k}"
        size = kernel.workspace_size(probe)
        self.workspace = torch.empty(max(size, 1), dtype=torch.uint8, device=a.device)

    def __call__(self) -> None:
        p: Problem = self.kernel.problem(self.a, self.b, self.out, splits=self.splits, workspace=self.workspace)
        assert self.kernel.launch(p) == 0
