// Host side of the decode family's TMA weight stream: the 2-D tensor map of a weight, encoded by the driver
// (cuTensorMapEncodeTiled, reached through the runtime's driver entry point: no link against libcuda) and cached
// per thread by (pointer, shape, leading dimension, box), so that a model's repeated projections encode each weight
// once. Torch-free.
#ifndef CUDAL2_DECODE_WEIGHT_MAP_H_
#define CUDAL2_DECODE_WEIGHT_MAP_H_

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "cudal2/abi.h"
#include "cudal2/params_cache.h"

namespace cudal2 {
namespace decode {

// The driver's cuTensorMapEncodeTiled, or nullptr when the driver does not provide it (resolved once).
inline PFN_cuTensorMapEncodeTiled_v12000 tensor_map_encoder() {
  static const PFN_cuTensorMapEncodeTiled_v12000 encode = [] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult found = cudaDriverEntryPointSymbolNotFound;
#if __CUDACC_VER_MAJOR__ > 12
    const cudaError_t err = cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &fn, 12000, cudaEnableDefault,
                                                             &found);
#else
    const cudaError_t err = cudaGetDriverEntryPoint("cuTensorMapEncodeTiled", &fn, cudaEnableDefault, &found);
#endif
    return err == cudaSuccess && found == cudaDriverEntryPointSuccess
               ? reinterpret_cast<PFN_cuTensorMapEncodeTiled_v12000>(fn)
               : nullptr;
  }();
  return encode;
}

// Encodes into `map` the row-major [rows][cols] matrix of 16-bit elements at `base` (row stride `ld` elements) read
// in boxes of [box_rows][64] elements with the 128-byte swizzle; out-of-bounds box elements read as zeros.
// False when the driver refuses it (e.g. `base` not 16-byte aligned, `ld` not a multiple of 8).
inline bool encode_weight_map(CUtensorMap* map, const void* base, bool bf16, int64_t rows, int64_t cols, int64_t ld,
                              int box_rows) {
  const PFN_cuTensorMapEncodeTiled_v12000 encode = tensor_map_encoder();
  if (encode == nullptr) return false;
  const cuuint64_t dims[2] = {static_cast<cuuint64_t>(cols), static_cast<cuuint64_t>(rows)};
  const cuuint64_t strides[1] = {static_cast<cuuint64_t>(ld) * 2};  // bytes of one row; dim 0 is contiguous
  const cuuint32_t box[2] = {64, static_cast<cuuint32_t>(box_rows)};
  const cuuint32_t element_strides[2] = {1, 1};
  const CUresult r = encode(map, bf16 ? CU_TENSOR_MAP_DATA_TYPE_BFLOAT16 : CU_TENSOR_MAP_DATA_TYPE_FLOAT16, 2,
                            const_cast<void*>(base), dims, strides, box, element_strides,
                            CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                            CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  return r == CUDA_SUCCESS;
}

// A weight's tensor map, or that the driver refused it.
struct WeightMap {
  CUtensorMap map;  // 64-byte aligned by its type
  bool ok;
};

// The tensor map of `p`'s weight (B) for boxes of [box_rows][64]: [N][K] for NT, [K][N] for NN. Cached per thread
// (the last 32 weights); the cache key is a problem holding only the weight's fields.
inline const WeightMap& weight_map(const cudal2_problem* p, int box_rows) {
  static thread_local ParamsCache<WeightMap> cache;
  cudal2_problem key = {};
  key.b = p->b;
  key.ldb = p->ldb;
  key.n = p->n;
  key.k = p->k;
  key.dtype = p->dtype;
  key.layout = p->layout;
  key.splits = box_rows;  // the box is part of the map
  return cache.get(key, [&] {
    WeightMap w;
    const bool nt = p->layout == CUDAL2_NT;
    w.ok = encode_weight_map(&w.map, p->b, p->dtype == CUDAL2_BF16, nt ? p->n : p->k, nt ? p->k : p->n, p->ldb,
                             box_rows);
    return w;
  });
}

}  // namespace decode
}  // namespace cudal2

#endif  // CUDAL2_DECODE_WEIGHT_MAP_H_
