"""GPU tests of the correctness harness: torch passes every check; each deliberately broken implementation fails the
check made to catch it; the API fuzzer passes torch; a planted out-of-bounds write and a planted shared-memory race
in a fixture kernel library are caught by the guard check and by scripts/sanitize_kernels.py."""
from __future__ import annotations

import importlib.util
import json
import shutil
import subprocess
from pathlib import Path

import pytest
import torch

from cudal2_testing.correctness import CHECKS, all_passed, run_checks, summarize, torch_impl
from cudal2_testing.correctness.fuzz import fp32_api, make_cases, run_fuzz, validate_report
from cudal2_testing.correctness.kernel_impl import KernelImpl
from cudal2_testing.correctness.negative_controls import (Nondeterministic, fp16_accumulating, ignores_leading_dimension,
                                                       last_row_unwritten, low_precision, writes_past_the_end)
from cudal2_testing.kernel_library import KernelLibrary

REPO = Path(__file__).resolve().parents[2]
SHAPES = [(128, 256, 4096), (7, 65, 1023), (1, 4104, 4097)]
SHAPE = (96, 136, 4096)


def load_script(name: str):
    spec = importlib.util.spec_from_file_location(name, REPO / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("layout,with_bias", [("nn", False), ("nt", True), ("nt", False)])
def test_torch_passes_every_check(layout, with_bias, dtype):
    results = run_checks(torch_impl(layout), SHAPES, layout, dtype, with_bias=with_bias)
    assert {r.check for r in results} == set(CHECKS)
    assert all_passed(results), summarize(results)


# ---------------------------------------------------------------- broken implementations, one per check


class PrivateStream:
    """Launches on its own stream without ordering it after the caller's (CUDA-L2's released kernels did this)."""

    def __init__(self) -> None:
        self.stream = torch.cuda.Stream()

    def __call__(self, a, b, bias, out):
        with torch.cuda.stream(self.stream):
            return torch.matmul(a, b, out=out)


def host_synchronising(a, b, bias, out):
    torch.matmul(a, b, out=out)
    torch.cuda.synchronize()
    return out


class PointerMemo:
    """Skips the GEMM when it saw the same pointers before (a static cache keyed by pointers)."""

    def __init__(self) -> None:
        self.seen: set[tuple[int, int, int]] = set()

    def __call__(self, a, b, bias, out):
        key = (a.data_ptr(), b.data_ptr(), out.data_ptr())
        if key not in self.seen:
            self.seen.add(key)
            torch.matmul(a, b, out=out)
        return out


def reads_to_host(a, b, bias, out):
    if torch.isnan(a).any().item():  # a host read: not capturable
        raise ValueError("NaN input")
    return torch.matmul(a, b, out=out)


@pytest.mark.parametrize("make_impl,check,fragment", [
    (lambda: fp16_accumulating, "exact", "outputs differ"),
    (lambda: last_row_unwritten, "guards", "NaN left in 1 of 96 rows (first row 95"),
    (lambda: writes_past_the_end, "guards", "after the view"),
    (lambda: ignores_leading_dimension, "layouts", "ld+8"),
    (lambda: low_precision, "random", "rel_err="),
    (Nondeterministic, "determinism", "1 outputs differ"),
    (PrivateStream, "stream", "the work ran on another stream"),
    (PrivateStream, "graph", ""),  # replay misses the side-stream work, or the capture rejects it
    (lambda: host_synchronising, "stream", "synchronised the host"),
    (PointerMemo, "graph", "replay does not follow the new inputs"),
    (lambda: reads_to_host, "graph", "capture failed"),
])
def test_broken_impl_fails_its_check(make_impl, check, fragment):
    (result,) = run_checks(make_impl(), [SHAPE], "nn", torch.float16, checks=[check], seeds=(0,))
    assert not result.passed and fragment in result.detail, result.detail
    (control,) = run_checks(torch_impl("nn"), [SHAPE], "nn", torch.float16, checks=[check], seeds=(0,))
    assert control.passed, control.detail


# ---------------------------------------------------------------- fuzzer

def test_fuzzer_passes_fp32_formulation(tmp_path):
    out = tmp_path / "fuzz.json"
    assert load_script("fuzz_api").main(["--impl", "fp32", "--cases", "1000", "--seed", "11", "--out", str(out)]) == 0
    doc = json.loads(out.read_text())
    validate_report(doc)
    assert doc["cases"] == 1000 and doc["failures"] == 0 and doc["environment"]["gpu"]


def test_fuzzer_flags_a_linear_that_drops_the_bias():
    matmul, linear = fp32_api()
    cases = [c for c in make_cases(12, 3000) if c.k <= 256][:300]  # the bias is not lost in the sum's rounding
    doc = run_fuzz(12, cases, matmul, lambda x, w, bias=None: linear(x, w), "cuda", "no-bias", {})
    validate_report(doc)
    assert {f["index"] for f in doc["failed_cases"]} == {c.index for c in cases if c.bias}


# ---------------------------------------------------------------- fixture kernel library (needs nvcc)

FIXTURE_CU = r'''
// Naive GEMM kernels implementing the kernel C ABI: one correct, one writing a row past D, one racy.
#include <cuda_fp16.h>
#include "cudal2/kernel_export.h"

namespace {
constexpr int kTile = 16;

template <int kMode>  // 0: correct; 1: the last row also writes the row after D; 2: shared memory read, no barrier
__global__ void naive_gemm(cudal2_problem p) {
  __shared__ float tile[kTile][kTile];
  const int64_t row = blockIdx.y * kTile + threadIdx.y, col = blockIdx.x * kTile + threadIdx.x;
  const __half* a = static_cast<const __half*>(p.a);
  const __half* b = static_cast<const __half*>(p.b);
  float acc = 0.f;
  for (int64_t k = 0; row < p.m && col < p.n && k < p.k; ++k) {
    acc += __half2float(a[row * p.lda + k]) * __half2float(b[col * p.ldb + k]);
  }
  if (kMode == 2) {
    tile[threadIdx.y][threadIdx.x] = acc;
    acc += tile[(threadIdx.y + kTile / 2) % kTile][threadIdx.x] * 0.f;  // written by another warp
  }
  if (row < p.m && col < p.n) {
    if (p.bias) acc += __half2float(static_cast<const __half*>(p.bias)[col]);
    __half* d = static_cast<__half*>(p.d);
    d[row * p.ldd + col] = __float2half(acc);
    if (kMode == 1 && row == p.m - 1) d[(row + 1) * p.ldd + col] = __float2half(acc);
  }
}

cudal2_status can_implement(const cudal2_problem* p) { return cudal2::check_common(p, CUDAL2_FP16, CUDAL2_NT); }
size_t workspace_size(const cudal2_problem*) { return 0; }

template <int kMode>
cudal2_status launch(const cudal2_problem* p) {
  const cudal2_status s = can_implement(p);
  if (s != CUDAL2_OK) return s;
  const dim3 block(kTile, kTile), grid((p->n + kTile - 1) / kTile, (p->m + kTile - 1) / kTile);
  naive_gemm<kMode><<<grid, block, 0, static_cast<cudaStream_t>(p->stream)>>>(*p);
  return cudal2::launch_status(cudaGetLastError());
}
}  // namespace

CUDAL2_EXPORT_KERNEL(fixture_clean_nt, "fixture", 70, 120, CUDAL2_FP16, CUDAL2_NT, 1, can_implement, workspace_size,
                     launch<0>)
CUDAL2_EXPORT_KERNEL(fixture_oob_nt, "fixture", 70, 120, CUDAL2_FP16, CUDAL2_NT, 1, can_implement, workspace_size,
                     launch<1>)
CUDAL2_EXPORT_KERNEL(fixture_racy_nt, "fixture_racy", 70, 120, CUDAL2_FP16, CUDAL2_NT, 1, can_implement,
                     workspace_size, launch<2>)

extern "C" const cudal2_kernel* const* cudal2_kernel_library(int* count) {
  static const cudal2_kernel* const kernels[] = {cudal2_kernel_fixture_clean_nt(), cudal2_kernel_fixture_oob_nt(),
                                                 cudal2_kernel_fixture_racy_nt()};
  *count = 3;
  return kernels;
}
extern "C" const char* cudal2_kernel_library_archs(void) { return FIXTURE_ARCH; }
'''


@pytest.fixture(scope="module")
def fixture_lib(tmp_path_factory) -> Path:
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc not found: cannot build the fixture kernel library")
    major, minor = torch.cuda.get_device_capability()
    arch = f"{major}{minor}"
    folder = tmp_path_factory.mktemp("fixture")
    (folder / "fixture.cu").write_text(FIXTURE_CU)
    lib = folder / "libfixture.so"
    subprocess.run([nvcc, "-std=c++17", "-O2", "-shared", "-Xcompiler", "-fPIC", f"-DFIXTURE_ARCH=\"{arch}\"",
                    f"-gencode=arch=compute_{arch},code=sm_{arch}", "-I", str(REPO / "csrc" / "include"),
                    str(folder / "fixture.cu"), "-o", str(lib)], check=True)
    return lib


def test_kernel_impl_clean_passes_and_oob_fails_guards(fixture_lib):
    kernels = KernelLibrary(fixture_lib).kernels
    shapes = [(129, 136, 72), (1, 8, 4104)]
    clean = run_checks(KernelImpl(kernels["fixture_clean_nt"]), shapes, "nt", torch.float16, with_bias=True)
    assert all_passed(clean), summarize(clean)
    (oob,) = run_checks(KernelImpl(kernels["fixture_oob_nt"]), shapes[:1], "nt", torch.float16, with_bias=True,
                        checks=["guards"])
    assert not oob.passed and "out: " in oob.detail and "after the view" in oob.detail, oob.detail


def test_sanitizer_flags_planted_oob_write_and_race(fixture_lib, tmp_path):
    if shutil.which("compute-sanitizer") is None:
        pytest.skip("compute-sanitizer not found")
    out = tmp_path / "sanitize.json"
    rc = load_script("sanitize_kernels").main(["--lib", str(fixture_lib), "--racecheck-families", "fixture_racy",
                                               "--shapes", "129x136x72", "--jobs", "4", "--timeout", "90",
                                               "--out", str(out)])
    doc = json.loads(out.read_text())
    clean = doc["kernels"]["fixture_clean_nt"]["memcheck"]
    if clean["status"] == "unsupported_device":
        pytest.skip("compute-sanitizer does not support this device (sandboxed runtime)")
    assert rc == 1
    assert clean["status"] == "clean", clean
    assert clean["shapes"] == {"129x136x72": clean["shapes"]["129x136x72"]} and "ok" in clean["shapes"]["129x136x72"]
    assert doc["kernels"]["fixture_oob_nt"]["memcheck"]["status"] == "errors"
    assert doc["kernels"]["fixture_racy_nt"]["racecheck"]["status"] == "errors"
    assert doc["kernels"]["fixture_racy_nt"]["memcheck"]["status"] == "clean"
    assert doc["failed"] == ["fixture_oob_nt", "fixture_racy_nt"]
