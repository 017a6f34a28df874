// Host-side description of one GEMM as the dispatcher sees it (torch-free), and its cache keys.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <functional>

#include "cudal2/abi.h"

namespace cudal2 {

// D[M, N] = A[M, K] @ op(B) (+ bias), row-major operands with unit inner stride (see cudal2/abi.h for layouts).
struct GemmArgs {
  int64_t m = 0, n = 0, k = 0;
  const void* a = nullptr;
  int64_t lda = 0;
  const void* b = nullptr;
  int64_t ldb = 0;
  void* d = nullptr;
  int64_t ldd = 0;
  const void* bias = nullptr;
  cudal2_dtype dtype = CUDAL2_FP16;
  cudal2_layout layout = CUDAL2_NN;
  int device = 0;
  cudaStream_t stream = nullptr;
};

// Largest power of two (<= 16) dividing the address: the alignment cuBLASLt and the kernels can rely on.
inline int pointer_alignment(const void* p) {
  const auto addr = reinterpret_cast<uintptr_t>(p);
  int align = 16;
  while (align > 1 && (addr % align) != 0) align /= 2;
  return align;
}

// What the table is keyed by: layout, dtype and the problem size.
struct ShapeKey {
  int32_t layout, dtype;
  int64_t m, n, k;
  bool operator==(const ShapeKey& o) const {
    return layout == o.layout && dtype == o.dtype && m == o.m && n == o.n && k == o.k;
  }
};

struct ShapeKeyHash {
  size_t operator()(const ShapeKey& key) const {
    size_t h = std::hash<int64_t>()(key.m);
    h = h * 1000003u ^ std::hash<int64_t>()(key.n);
    h = h * 1000003u ^ std::hash<int64_t>()(key.k);
    return h * 31u ^ static_cast<size_t>(key.layout * 2 + key.dtype);
  }
};

inline ShapeKey shape_key(const GemmArgs& g) { return {g.layout, g.dtype, g.m, g.n, g.k}; }

}  // namespace cudal2
