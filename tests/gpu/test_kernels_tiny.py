"""GPU tests of the `tiny` kernel family (latency-bound GEMMs), run through the torch-free kernel library.

The library is $CUDAL2_TEST_KERNEL_LIB (e.g. python -m build_tools.kernel_lib --names tiny_... --out lib.so), else
the one the build installed (cudal2_ops/libcudal2_kernels.so); a GPU run with neither fails. Problems are checked
with the correctness harness (cudal2_testing.correctness: randn against the fp32 reference within the baseline's
error, exact integers, NaN-poisoned output and 64 KiB guards, determinism, the caller's stream, CUDA-graph capture)
at every `splits` value: on sm_90 splits 2..16 reduce K in a thread-block cluster (above 8 with the non-portable
cluster size, clamped to 8 where the device cannot co-schedule 16), before sm_90 every value runs unsplit. The third
version's launcher picks per problem what runs (families/tiny.py launch_plan): exact-integer checks sit on each side
of its rule (one K tile, the K range the stages hold at once and one tile more, MAX_WARP_CHAIN_K and one step more,
where the K groups join) and on the register epilogue's element-by-element stores (D not 16-byte aligned). Every tiny
kernel of the library is tested; beyond the default set, these variants cover each warp layout the family derives
(16x16 tile with 8 K groups, 16x16 warp tiles of a 16x64 tile with 2 K groups, 32x16 warp tiles with tile_m 128 and
2 K groups (4 exceed the register bound), one 32x32 warp, 8 covering warps of 32x32, 4 K groups on 8 resident stages):
tiny_fp16_nn_16x16x128_s2_w8 tiny_bf16_nt_16x64x64_s3_w8 tiny_bf16_nn_128x16x64_s2_w8 tiny_fp16_nt_32x32x32_s3_w1
tiny_bf16_nt_64x128x128_s2_w8 tiny_fp16_nt_32x32x64_s8_w16 (python -m cudal2_catalog.codegen --names ..., then build
them with the defaults). Timing is the sweep's job (python -m search.sweep) and benchmarks.latency_floor's.
"""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

from cudal2_testing.correctness import all_passed, exact_expected, exact_inputs, reference, run_checks, summarize
from cudal2_testing.correctness.inputs import generator, random_inputs
from cudal2_testing.correctness.kernel_impl import KernelImpl
from cudal2_testing.correctness.reference import REL_TOL
from cudal2_testing.kernel_library import Kernel, KernelError, KernelLibrary
from cudal2_catalog.config import HgemmConfig
from cudal2_catalog.families import tiny
from dependent_launch import assert_chain_sees_preceding_writes
from kernel_lib_under_test import library_under_test

DTYPES = (torch.float16, torch.bfloat16)
# Issue 29's problems: tiny GEMMs (launch-latency bound) and long K with a small M x N (under-parallelised).
TINY_SHAPES = [(128, 256, 64), (512, 128, 64), (2048, 64, 64)]
LONG_K_SHAPES = [(64, 256, 4096), (128, 64, 8192), (128, 1024, 16384), (256, 1024, 8192)]
# Residues in M and N against every tile, K a multiple of 8 but not of the K tile, a single row and column.
ODD_SHAPES = [(1, 1, 8), (7, 65, 1000), (33, 97, 136), (65, 1000, 8), (129, 31, 4104), (97, 200, 520), (17, 23, 24)]
# The harness checks a kernel can pass: "layouts" breaks 16-byte alignment on purpose, which the family refuses.
CHECKS = ("random", "exact", "exact_small_k", "guards", "determinism", "stream", "graph")
# Above 16: split across the grid (a cooperative launch) where every CTA fits on the GPU at once, else clamped to a
# cluster (16, or 8 where 16 cannot be co-scheduled).
SPLITS = (0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 12, 15, 16, 24, 64)
GRID_SPLITS = (24, 32, 64)
# Long K on few output tiles: where the grid-wide split runs (its CTAs fit on the GPU at once).
GRID_SHAPES = [(64, 64, 16384), (64, 128, 8192), (33, 40, 12296)]
STATUS_UNSUPPORTED = 1


@pytest.fixture(scope="module")
def kernels() -> dict[str, Kernel]:
    path = library_under_test()
    found = {n: k for n, k in KernelLibrary(path).runnable_on().items() if k.family == "tiny"}
    if not found:
        pytest.skip(f"no tiny kernel in {path} runs on this GPU")
    return found


def of(kernels: dict[str, Kernel], dtype: torch.dtype, layout: str) -> list[Kernel]:
    """The library's tiny kernels of one dtype and layout (skips when there is none)."""
    found = [k for k in kernels.values() if k.dtype == dtype and k.layout == layout]
    if not found:
        pytest.skip(f"no {layout} {dtype} tiny kernel in the library")
    return found


def tile_m(kernel: Kernel) -> int:
    """The kernel's CTA tile rows (from its name)."""
    return int(kernel.name.split("_")[3].split("x")[0])


def rule_depths(kernel: Kernel) -> list[int]:
    """K on each side of the launcher's rule for `kernel` at one split: a partial and a whole K tile, the most K tiles
    requested at once (stages) and 8 more (streamed), MAX_WARP_CHAIN_K and 8 more (the K groups join)."""
    cfg = HgemmConfig.from_name(kernel.name)
    edges = (cfg.tile_k, cfg.stages * cfg.tile_k, tiny.MAX_WARP_CHAIN_K)
    return sorted({8, *edges, *(edge + 8 for edge in edges)})


def assert_checks_pass(kernel: Kernel, shapes, with_bias: bool, splits: int = 0, checks=CHECKS) -> None:
    """Runs the correctness harness on `kernel` with `splits` over `shapes`; every check must pass."""
    results = run_checks(KernelImpl(kernel, splits=splits), shapes, kernel.layout, kernel.dtype, with_bias=with_bias,
                         checks=checks)
    assert all_passed(results), f"{kernel.name} splits={splits}:\n{summarize(results)}"


def padded(rows: int, cols: int, dtype: torch.dtype, fill: torch.Tensor) -> torch.Tensor:
    """A [rows, cols] view of `fill` with row stride round_up(cols, 8) whose padding holds NaN (reading it shows)."""
    storage = torch.full((rows, (cols + 7) // 8 * 8), float("nan"), dtype=dtype, device="cuda")
    view = storage[:, :cols]
    view.copy_(fill)
    return view


@pytest.mark.parametrize("layout", ["nt", "nn"])
@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("with_bias", [False, True])
def test_issue_shapes_pass_the_harness(kernels, layout, dtype, with_bias):
    """The tiny and long-K problems of issue 29 with the automatic split (a cluster on sm_90 for long K)."""
    for kernel in of(kernels, dtype, layout):
        assert_checks_pass(kernel, TINY_SHAPES + LONG_K_SHAPES, with_bias)


@pytest.mark.parametrize("splits", SPLITS)
def test_every_split_count_passes_the_harness(kernels, splits):
    """Each cluster size (and above 16 the grid-wide split, or its clamp) on a long-K problem and on odd shapes, with
    bias: fewer valid rows than split CTAs (5 rows over up to 64 owners), M and N residues, K not a multiple of the K
    tile."""
    for kernel in kernels.values():
        shapes = [(64, 256, 4096), (67, 136, 4104), (5, 40, 4096)] + ([(33, 97, 1000)] if kernel.layout == "nt" else [])
        assert_checks_pass(kernel, shapes, True, splits, checks=("random", "exact", "guards", "determinism"))


@pytest.mark.parametrize("layout", ["nt", "nn"])
@pytest.mark.parametrize("dtype", DTYPES)
def test_odd_shapes_with_padded_rows(kernels, layout, dtype):
    """Any M and N, K % 8 == 0: leading dimensions padded to 8 with NaN in the padding (never read), output padding
    columns untouched, bias fused, at splits 0, 1, 3 and 16."""
    for kernel in of(kernels, dtype, layout):
        for m, n, k in ODD_SHAPES:
            a, b, bias = random_inputs((m, n, k), layout, dtype, True, m * n + k, "cuda")
            a, b = padded(*a.shape, dtype, a), padded(*b.shape, dtype, b)
            ref = reference(a, b, layout, bias)
            for splits in (0, 1, 3, 16):
                out = padded(m, n, dtype, torch.zeros(m, n, dtype=dtype, device="cuda"))
                out.fill_(float("nan"))
                kernel.run(a, b, bias, out=out, splits=splits)
                assert not out.isnan().any(), f"{kernel.name} {m}x{n}x{k} splits={splits}: outputs left unwritten"
                err = ((out.float() - ref).norm() / ref.norm().clamp_min(1e-30)).item()
                assert err <= REL_TOL[dtype], f"{kernel.name} {m}x{n}x{k} splits={splits}: rel error {err:.2e}"
                beyond = out.as_strided((m, out.stride(0)), out.stride())[:, n:]
                assert beyond.isnan().all(), f"{kernel.name} {m}x{n}x{k}: wrote past N"


@pytest.mark.parametrize("splits", [0, 1, 3, 4, 8, 12, 16, 32, 64])
def test_exact_integers_with_integer_bias(kernels, splits):
    """0/1 operands with sums above 2048 and an integer bias: dtype(exact) bit for bit (a K tile summed twice or
    missed, or a bias added per split, changes the result)."""
    for kernel in kernels.values():
        shape = (70, 136, 4104)
        a, b, _ = exact_inputs(shape, kernel.layout, kernel.dtype, False, 5, "cuda")
        bias = torch.randint(-4, 5, (shape[1],), generator=generator(6, "cuda"), device="cuda").to(kernel.dtype)
        expected = exact_expected(a, b, kernel.layout, bias)
        assert expected.float().max() > 2048
        out = kernel.run(a, b, bias, splits=splits)
        assert torch.equal(out, expected), f"{kernel.name} splits={splits}: {(out != expected).sum().item()} differ"


def test_workspace_only_for_the_grid_wide_split(kernels):
    """No workspace within a cluster; the grid-wide split asks for its partial slots (the model's bytes per output
    tile) and refuses to launch with less; on sm_90 it runs on a long-K problem of one output tile (with several
    tiles a kernel whose co-resident CTAs per tile stay within a cluster's splits, as a one-CTA-per-SM kernel on 8
    tiles, keeps every request in the cluster)."""
    grid_wide = 0
    for kernel in kernels.values():
        cfg = HgemmConfig.from_name(kernel.name)
        m, n, k = cfg.tile_m, cfg.tile_n, 16384
        a, b, _ = random_inputs((m, n, k), kernel.layout, kernel.dtype, False, 0, "cuda")
        out = torch.empty(m, n, dtype=kernel.dtype, device="cuda")
        for splits in SPLITS:
            p = kernel.problem(a, b, out, splits=splits)
            need = kernel.workspace_size(p)
            assert kernel.can_implement(p), (kernel.name, splits)
            if splits <= tiny.MAX_SPLITS:
                assert need == 0, (kernel.name, splits)
            elif need:
                tiles = -(-m // cfg.tile_m) * -(-n // cfg.tile_n)
                per_tile = [tiny.launch_plan(cfg, k, s).workspace_bytes_per_tile
                            for s in range(tiny.MAX_SPLITS + 1, splits + 1)]
                assert need in {tiles * b for b in per_tile}, (kernel.name, splits, need)
                small = torch.empty(need - 16, dtype=torch.uint8, device="cuda")
                assert kernel.launch(kernel.problem(a, b, out, splits=splits, workspace=small)) == 2, kernel.name
                grid_wide += 1
    if torch.cuda.get_device_capability()[0] >= 9:
        assert grid_wide > 0, "no kernel ran the grid-wide split on a long-K problem of one output tile"


@pytest.mark.parametrize("splits", GRID_SPLITS)
def test_grid_wide_split_passes_the_harness(kernels, splits):
    """The grid-wide split (a cooperative launch exchanging partials through the caller's workspace, fenced by guard
    regions) through every check: random and exact inputs, guards, determinism, the caller's stream and CUDA-graph
    capture, with bias."""
    for kernel in kernels.values():
        assert_checks_pass(kernel, GRID_SHAPES, True, splits)


def test_rejects_unsupported(kernels):
    """K % 8 != 0, A or B not 16-byte aligned, a leading dimension not a multiple of 8, and more than 65535 M tiles
    are refused by can_implement (and by launch, so the dispatcher falls back)."""
    for kernel in kernels.values():
        dt, layout = kernel.dtype, kernel.layout

        def b_of(n: int, k: int) -> torch.Tensor:
            return torch.zeros((n, k) if layout == "nt" else (k, n), dtype=dt, device="cuda")

        out = torch.empty(16, 64, dtype=dt, device="cuda")
        a = torch.zeros(16, 64, dtype=dt, device="cuda")
        assert kernel.can_implement(kernel.problem(a, b_of(64, 64), out))
        refused = [
            (torch.zeros(16, 60, dtype=dt, device="cuda"), b_of(64, 60), out),                  # K % 8
            (torch.zeros(16, 72, dtype=dt, device="cuda")[:, 1:65], b_of(64, 64), out),         # A misaligned
            (torch.zeros(16, 68, dtype=dt, device="cuda")[:, :64], b_of(64, 64), out),          # lda % 8
            (a, torch.zeros(64 * 64 + 8, dtype=dt, device="cuda")[1:64 * 64 + 1].view(b_of(64, 64).shape), out),
        ]
        rows = 65535 * tile_m(kernel) + 1
        refused.append((torch.zeros(rows, 8, dtype=dt, device="cuda"), b_of(8, 8),
                        torch.empty(rows, 8, dtype=dt, device="cuda")))                          # M tiles
        for i, (aa, bb, oo) in enumerate(refused):
            p = kernel.problem(aa, bb, oo)
            assert not kernel.can_implement(p), f"{kernel.name}: case {i} accepted"
            assert kernel.launch(p) == STATUS_UNSUPPORTED, f"{kernel.name}: case {i} launched"
        with pytest.raises(KernelError):
            kernel.run(*refused[0][:2])


@pytest.mark.parametrize("splits", [1, 4, 8, 16])
def test_programmatic_launch_sees_preceding_writes(kernels, splits):
    """Enqueued back to back without syncs (programmatic dependent launch on sm_90), every GEMM sees what the kernel
    just before it wrote: a copy kernel overwrites the weight before the first GEMM, and the second GEMM reads the
    first one's output. Sparse 0/1 inputs keep every value an integer below 2048: results are exact."""
    for kernel in of(kernels, torch.float16, "nt"):
        assert_chain_sees_preceding_writes(kernel, 64, 1024, splits)


# Run in a fresh process: the first launch of each tiny kernel there happens inside a CUDA-graph capture, so its
# once-per-device preparation (shared-memory attribute, non-portable cluster attribute, cluster occupancy queries)
# runs while the stream captures. Exits non-zero with a message on the first kernel that fails.
FIRST_LAUNCH_IN_CAPTURE = r"""
import sys
import torch
from cudal2_testing.correctness import reference
from cudal2_testing.correctness.reference import REL_TOL
from cudal2_testing.kernel_library import KernelLibrary

m, n, k = 64, 256, 4096
for name, kernel in sorted(KernelLibrary(sys.argv[1]).runnable_on().items()):
    if kernel.family != "tiny":
        continue
    a = torch.randn(m, k, dtype=kernel.dtype, device="cuda")
    b = torch.randn(*((n, k) if kernel.layout == "nt" else (k, n)), dtype=kernel.dtype, device="cuda")
    out = torch.full((m, n), float("nan"), dtype=kernel.dtype, device="cuda")
    graph = torch.cuda.CUDAGraph()
    try:
        with torch.cuda.graph(graph):
            kernel.run(a, b, out=out, splits=16)
    except Exception as exc:
        sys.exit(f"{name}: first launch inside a capture failed: {exc}")
    graph.replay()
    torch.cuda.synchronize()
    ref = reference(a, b, kernel.layout)
    err = ((out.float() - ref).norm() / ref.norm()).item()
    if not err <= REL_TOL[kernel.dtype]:
        sys.exit(f"{name}: replay of the captured first launch: rel error {err:.2e}")
    print(name, "ok")
"""


def test_first_launch_inside_a_graph_capture(kernels):
    """A kernel whose very first launch in the process is captured into a CUDA graph (no eager warm-up: the harness's
    graph check warms up first) captures, and its replay is right: the once-per-device preparation is legal while
    the stream captures and leaves no error behind."""
    repo = Path(__file__).resolve().parents[2]
    proc = subprocess.run([sys.executable, "-c", FIRST_LAUNCH_IN_CAPTURE, library_under_test()], cwd=repo,
                          capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-4000:]
    assert proc.stdout.count(" ok") == len(kernels), proc.stdout[-4000:]


@pytest.mark.parametrize("splits", [1, 0, 3])
def test_exact_integers_on_each_side_of_the_launch_rule(kernels, splits):
    """One round trip or streamed, covering warps alone or with K groups, register epilogue or receive buffer: the
    same exact integers (0/1 operands, integer bias) bit for bit, M and N residues included."""
    for kernel in kernels.values():
        plans = set()
        for k in rule_depths(kernel):
            plans.add(tiny.launch_plan(HgemmConfig.from_name(kernel.name), k, 1)[1:3])
            for m, n in [(tile_m(kernel) + 3, 72), (5, 40)]:
                a, b, _ = exact_inputs((m, n, k), kernel.layout, kernel.dtype, False, m + k, "cuda")
                bias = torch.randint(-4, 5, (n,), generator=generator(k, "cuda"), device="cuda").to(kernel.dtype)
                expected = exact_expected(a, b, kernel.layout, bias)
                out = kernel.run(a, b, bias, splits=splits)
                assert torch.equal(out, expected), (f"{kernel.name} {m}x{n}x{k} splits={splits}: "
                                                    f"{(out != expected).sum().item()} differ")
        assert len(plans) >= 2, f"{kernel.name}: the depths should reach several plans, got {plans}"


@pytest.mark.parametrize("with_bias", [False, True])
def test_register_epilogue_without_16_byte_aligned_rows(kernels, with_bias):
    """D two bytes past 16-byte alignment with an odd row stride: every output stored element by element, right,
    and nothing written before the first or past the last column of a row (NaN stays). N is odd-sized for NT; for NN
    it is B's row stride, which the family requires to be a multiple of 8."""
    for kernel in kernels.values():
        m, n, k, ldd = 37, 50 if kernel.layout == "nt" else 56, 128, 61
        a, b, _ = exact_inputs((m, n, k), kernel.layout, kernel.dtype, False, 11, "cuda")
        bias = (torch.randint(-4, 5, (n,), generator=generator(12, "cuda"), device="cuda").to(kernel.dtype)
                if with_bias else None)
        storage = torch.full((m * ldd + 1,), float("nan"), dtype=kernel.dtype, device="cuda")
        out = storage[1:].view(m, ldd)[:, :n]
        kernel.run(a, b, bias, out=out, splits=1)
        assert torch.equal(out, exact_expected(a, b, kernel.layout, bias)), kernel.name
        assert storage[0].isnan() and storage[1:].view(m, ldd)[:, n:].isnan().all(), f"{kernel.name}: wrote outside D"
