// Floor kernels of benchmarks.latency_floor (torch-free; compiled by it with nvcc into a small shared library and
// called through ctypes): an empty kernel, and a kernel that only moves a GEMM problem's data — reads every byte of A
// and B once and writes every element of C, each C value depending on loaded words (load, fold, store: the data path
// of a GEMM with no math). Both return the launch's cudaError_t.
#include <cuda_runtime.h>

#include <cstdint>

namespace {

constexpr int kThreads = 128;
constexpr int kChunksPerThread = 4;  // independent 16-byte loads (and stores) in flight per thread

__global__ void empty_kernel() {}

// Thread t of `threads` loads 16-byte chunks t, t + threads, ... of A then B (flat, `a_chunks` and `b_chunks` of
// them; the operands' bytes past the last whole chunk ride on the last thread), folds the words it read with xor,
// and stores that fold into C's chunks t, t + threads, ... (`c_elems` 2-byte elements, a partial last chunk element
// by element). Every C store waits for its thread's loads: one dependent round trip, as a GEMM's epilogue waits for
// its operands.
__global__ void __launch_bounds__(kThreads) move_kernel(const uint4* a, long long a_chunks, const uint4* b,
                                                        long long b_chunks, const uint16_t* a_tail,
                                                        const uint16_t* b_tail, int a_tail_elems, int b_tail_elems,
                                                        uint16_t* c, long long c_elems, long long threads) {
  const long long t = static_cast<long long>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (t >= threads) return;
  uint4 loaded[kChunksPerThread];
#pragma unroll
  for (int i = 0; i < kChunksPerThread; ++i) {
    const long long chunk = t + i * threads;
    loaded[i] = chunk < a_chunks              ? a[chunk]
                : chunk < a_chunks + b_chunks ? b[chunk - a_chunks]
                                              : make_uint4(0, 0, 0, 0);
  }
  uint32_t fold = 0;
#pragma unroll
  for (int i = 0; i < kChunksPerThread; ++i) fold ^= loaded[i].x ^ loaded[i].y ^ loaded[i].z ^ loaded[i].w;
  if (t == threads - 1) {
    for (int j = 0; j < a_tail_elems; ++j) fold ^= a_tail[j];
    for (int j = 0; j < b_tail_elems; ++j) fold ^= b_tail[j];
  }
  const long long c_chunks = c_elems / 8;
#pragma unroll
  for (int i = 0; i < kChunksPerThread; ++i) {
    const long long chunk = t + i * threads;
    if (chunk < c_chunks) {
      reinterpret_cast<uint4*>(c)[chunk] = make_uint4(fold, fold + 1, fold + 2, fold + 3);
    } else if (chunk == c_chunks) {
      for (long long e = chunk * 8; e < c_elems; ++e) c[e] = static_cast<uint16_t>(fold + e);
    }
  }
}

long long ceil_div(long long a, long long b) { return (a + b - 1) / b; }

}  // namespace

// One empty kernel node (1 CTA of 32 threads).
extern "C" int floor_empty(void* stream) {
  empty_kernel<<<1, 32, 0, static_cast<cudaStream_t>(stream)>>>();
  return static_cast<int>(cudaGetLastError());
}

// Reads a_elems elements at `a` and b_elems at `b` (contiguous, 16-byte aligned) and writes c_elems at `c`, with
// enough threads that each moves at most kChunksPerThread 16-byte chunks in and out.
extern "C" int floor_move(const void* a, long long a_elems, const void* b, long long b_elems, void* c,
                          long long c_elems, void* stream) {
  const long long a_chunks = a_elems / 8, b_chunks = b_elems / 8;
  const long long chunks = a_chunks + b_chunks > ceil_div(c_elems, 8) ? a_chunks + b_chunks : ceil_div(c_elems, 8);
  const long long threads = ceil_div(chunks > 0 ? chunks : 1, kChunksPerThread);
  const auto* a16 = static_cast<const uint16_t*>(a);
  const auto* b16 = static_cast<const uint16_t*>(b);
  move_kernel<<<static_cast<unsigned>(ceil_div(threads, kThreads)), kThreads, 0, static_cast<cudaStream_t>(stream)>>>(
      static_cast<const uint4*>(a), a_chunks, static_cast<const uint4*>(b), b_chunks, a16 + a_chunks * 8,
      b16 + b_chunks * 8, static_cast<int>(a_elems - a_chunks * 8), static_cast<int>(b_elems - b_chunks * 8),
      static_cast<uint16_t*>(c), c_elems, threads);
  return static_cast<int>(cudaGetLastError());
}
