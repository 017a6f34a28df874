// L2 prefetch of row-major matrices (GEMM weights): a small kernel that asks the memory system to bring part of each
// row into L2 without reading anything into registers, so that a later GEMM streams those bytes from L2.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace cudal2 {

// One matrix: `rows` rows of `row_bytes` bytes, `pitch_bytes` apart, starting at `base`.
struct L2PrefetchRegion {
  const void* base;
  int64_t rows;
  int64_t row_bytes;
  int64_t pitch_bytes;
};

constexpr int kMaxL2PrefetchRegions = 8;
constexpr int kL2PrefetchChunkBytes = 1024;  // each row is prefetched in chunks of 8 cache lines
constexpr int kL2PrefetchLineBytes = 128;

// Up to kMaxL2PrefetchRegions matrices prefetched by one launch. Of every 1 KiB chunk of every row, the first
// `lines_per_chunk` (1-8) 128-byte lines are prefetched: a fraction lines_per_chunk / 8 of the matrix, spread evenly
// over its rows and columns, so that a GEMM that splits rows or K between CTAs finds the same share in L2 everywhere.
struct L2PrefetchBatch {
  L2PrefetchRegion regions[kMaxL2PrefetchRegions];
  int count = 0;
  int lines_per_chunk = 8;
};

// Adds a kernel node that prefetches `batch` (sm_90: bulk L2 prefetches; older GPUs: per-line prefetches) to `graph`,
// after `deps`. The kernel reads nothing into the SMs and writes nothing, so it never changes a result. `*node` is
// left null when the batch is empty.
cudaError_t add_l2_prefetch_node(cudaGraphNode_t* node, cudaGraph_t graph, const cudaGraphNode_t* deps,
                                 size_t num_deps, const L2PrefetchBatch& batch, int sm_count);

}  // namespace cudal2
