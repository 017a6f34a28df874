"""csrc/include/cudal2/params_cache.h: the per-thread cache of launch params, compiled with the host C++ compiler."""
import shutil
import subprocess
from pathlib import Path

import pytest

INCLUDE = Path(__file__).resolve().parents[1] / "csrc" / "include"

PROGRAM = r"""
#include <cstdio>
#include "cudal2/params_cache.h"

int builds = 0;
int fail(const char* what) { std::printf("FAIL %s\n", what); return 1; }

int main() {
  cudal2::ParamsCache<long, 2> cache;
  cudal2_problem p{};
  p.m = 1; p.n = 4096; p.k = 4096; p.lda = 4096; p.ldb = 4096; p.ldd = 4096; p.sm_count = 132;
  auto build = [&] { return static_cast<long>(++builds); };
  if (cache.get(p, build) != 1 || cache.get(p, build) != 1) return fail("a repeat is a hit");
  cudal2_problem q = p;
  q.stream = reinterpret_cast<void*>(0x10);
  q.workspace_bytes = 123;
  if (cache.get(q, build) != 1) return fail("stream and workspace size are not part of the key");
  const int fields = 17;
  for (int f = 0; f < fields; ++f) {  // every field the params derive from is part of the key
    cache.get(p, build);  // p cached: r below differs from it in field f alone
    cudal2_problem r = p;
    switch (f) {
      case 0: r.m = 2; break;
      case 1: r.k = 8; break;
      case 2: r.a = &builds; break;
      case 3: r.b = &builds; break;
      case 4: r.d = &builds; break;
      case 5: r.bias = &builds; break;
      case 6: r.ldd = 8192; break;
      case 7: r.workspace = &builds; break;
      case 8: r.sm_count = 114; break;
      case 9: r.splits = 2; break;
      case 10: r.raster = 1; break;
      case 11: r.n = 1024; break;
      case 12: r.lda = 8192; break;
      case 13: r.ldb = 8192; break;
      case 14: r.swizzle = 2; break;
      case 15: r.dtype = CUDAL2_BF16; break;
      case 16: r.layout = CUDAL2_NT; break;
    }
    const int before = builds;
    cache.get(r, build);
    if (builds != before + 1) { std::printf("field %d: ", f); return fail("a changed field must rebuild"); }
  }
  // Capacity 2: the two most recent problems stay, the oldest goes first.
  cudal2_problem s = p, t = p;
  s.m = 3; t.m = 4;
  const long ps = cache.get(s, build), pt = cache.get(t, build);
  if (cache.get(s, build) != ps || cache.get(t, build) != pt) return fail("the last two problems are cached");
  const int before = builds;
  cache.get(p, build);
  if (builds != before + 1) return fail("an evicted problem is rebuilt");
  std::printf("OK\n");
  return 0;
}
"""


def test_params_cache_keys_and_eviction(tmp_path):
    cxx = shutil.which("g++") or shutil.which("c++")
    if cxx is None:
        pytest.skip("no host C++ compiler")
    src, exe = tmp_path / "params_cache_test.cpp", tmp_path / "params_cache_test"
    src.write_text(PROGRAM)
    subprocess.run([cxx, "-std=c++17", "-O1", "-I", str(INCLUDE), str(src), "-o", str(exe)], check=True)
    result = subprocess.run([str(exe)], capture_output=True, text=True)
    assert result.returncode == 0 and result.stdout.strip() == "OK", result.stdout
