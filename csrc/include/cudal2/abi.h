// The kernel C ABI: the contract between generated kernels, the search and the dispatcher.
//
// Every kernel translation unit (a template instantiation or a search-written kernel) exports one plain C function
//   extern "C" const cudal2_kernel* cudal2_kernel_<name>(void);
// returning a static descriptor. A kernel library (`libcudal2_kernels.so`, built torch-free by nvcc) additionally
// exports `cudal2_kernel_library`, which lists every kernel it holds. The dispatcher dlopens libraries and reads
// that list. Launchers never allocate, never synchronise the host, never create streams: the caller passes the
// stream and the workspace.
#ifndef CUDAL2_ABI_H_
#define CUDAL2_ABI_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define CUDAL2_ABI_VERSION 1

typedef enum cudal2_dtype { CUDAL2_FP16 = 0, CUDAL2_BF16 = 1 } cudal2_dtype;

// A is [M, K] row-major in every layout. D is [M, N] row-major.
// NN: B is [K, N] row-major (torch.matmul). NT: B is [N, K] row-major (the nn.Linear weight).
typedef enum cudal2_layout { CUDAL2_NN = 0, CUDAL2_NT = 1 } cudal2_layout;

typedef enum cudal2_status {
  CUDAL2_OK = 0,
  CUDAL2_UNSUPPORTED = 1,         // this kernel cannot run this problem (shape, alignment, dtype, layout)
  CUDAL2_WORKSPACE_TOO_SMALL = 2, // workspace_bytes < workspace_size(problem)
  CUDAL2_LAUNCH_FAILED = 3,       // the CUDA launch returned an error
  CUDAL2_BAD_ARGUMENT = 4         // null descriptor or inconsistent fields
} cudal2_status;

// One GEMM problem: D = A @ op(B) (+ bias), fp32 accumulation, D written in the input dtype.
typedef struct cudal2_problem {
  int64_t m, n, k;
  const void* a;          // [M, K], row stride lda (elements), lda >= K
  int64_t lda;
  const void* b;          // NN: [K, N] with row stride ldb >= N; NT: [N, K] with row stride ldb >= K
  int64_t ldb;
  void* d;                // [M, N], row stride ldd >= N
  int64_t ldd;
  const void* bias;       // [N] contiguous, same dtype as D, or NULL
  int32_t dtype;          // cudal2_dtype
  int32_t layout;         // cudal2_layout
  void* workspace;        // caller-owned device scratch, may be NULL when workspace_bytes == 0
  size_t workspace_bytes;
  void* stream;           // cudaStream_t of the caller
  int32_t sm_count;       // multiprocessors of the device the problem runs on
  // Runtime knobs (0 = the kernel's default). Their meaning is per family and documented there.
  int32_t splits;         // split-K / stream-K parts
  int32_t swizzle;        // threadblock swizzle (log2 of the group size, or a stride)
  int32_t raster;         // 0 = heuristic, 1 = along M, 2 = along N
} cudal2_problem;

typedef struct cudal2_kernel {
  int32_t abi_version;    // CUDAL2_ABI_VERSION
  const char* name;       // the kernel's whole identity (equals the file stem and the symbol suffix)
  const char* family;     // "sm90_tma_ws", "sm80_cute", "decode", ...
  int32_t sm_min;         // lowest compute capability (major*10+minor) the binary runs on
  int32_t sm_max;         // highest (90 for sm_90a code, which runs on 9.0 only)
  int32_t dtype;          // cudal2_dtype the kernel is instantiated for
  int32_t layout;         // cudal2_layout the kernel is instantiated for
  int32_t has_bias;       // 1 when the kernel can fuse a bias (it must then also run with bias == NULL)
  // CUDAL2_OK when launch() would run this problem correctly; cheap, host only.
  cudal2_status (*can_implement)(const cudal2_problem* p);
  // Bytes of workspace launch() needs for this problem (0 if none).
  size_t (*workspace_size)(const cudal2_problem* p);
  // Enqueue the GEMM on p->stream. Returns CUDAL2_OK or an error; never synchronises.
  cudal2_status (*launch)(const cudal2_problem* p);
} cudal2_kernel;

// Exported by each kernel library: the kernels it holds, `*count` of them.
typedef const cudal2_kernel* const* (*cudal2_kernel_library_fn)(int* count);
#define CUDAL2_KERNEL_LIBRARY_SYMBOL "cudal2_kernel_library"
// Exported by each kernel library: the GPU targets it was compiled for, e.g. "80;90a".
typedef const char* (*cudal2_kernel_library_archs_fn)(void);
#define CUDAL2_KERNEL_LIBRARY_ARCHS_SYMBOL "cudal2_kernel_library_archs"

#ifdef __cplusplus
}  // extern "C"
#endif

#endif  // CUDAL2_ABI_H_
