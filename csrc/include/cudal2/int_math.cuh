// Integer helpers usable on host and device (constexpr), shared by the mma.sync GEMM families. Torch-free.
#ifndef CUDAL2_INT_MATH_CUH_
#define CUDAL2_INT_MATH_CUH_

namespace cudal2 {

__host__ __device__ constexpr int ceil_div(int a, int b) { return (a + b - 1) / b; }
__host__ __device__ constexpr int min_int(int a, int b) { return a < b ? a : b; }
__host__ __device__ constexpr int max_int(int a, int b) { return a > b ? a : b; }

}  // namespace cudal2

#endif  // CUDAL2_INT_MATH_CUH_
