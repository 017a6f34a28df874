// Helpers shared by every kernel translation unit: problem checks and the export macro of the kernel C ABI.
#ifndef CUDAL2_KERNEL_EXPORT_H_
#define CUDAL2_KERNEL_EXPORT_H_

#include <cuda_runtime.h>

#include "cudal2/abi.h"

namespace cudal2 {

// True when `ptr` is aligned to `bytes`.
inline bool is_aligned(const void* ptr, size_t bytes) {
  return (reinterpret_cast<uintptr_t>(ptr) % bytes) == 0;
}

// Checks every family shares: non-null descriptor and pointers, positive sizes, consistent leading dimensions,
// and the dtype/layout the kernel was instantiated for.
inline cudal2_status check_common(const cudal2_problem* p, int dtype, int layout) {
  if (p == nullptr || p->a == nullptr || p->b == nullptr || p->d == nullptr) return CUDAL2_BAD_ARGUMENT;
  if (p->m <= 0 || p->n <= 0 || p->k <= 0) return CUDAL2_BAD_ARGUMENT;
  if (p->dtype != dtype || p->layout != layout) return CUDAL2_UNSUPPORTED;
  if (p->lda < p->k || p->ldd < p->n) return CUDAL2_BAD_ARGUMENT;
  if (p->ldb < (p->layout == CUDAL2_NT ? p->k : p->n)) return CUDAL2_BAD_ARGUMENT;
  return CUDAL2_OK;
}

// Maps the result of a launch to the ABI status.
inline cudal2_status launch_status(cudaError_t err) {
  return err == cudaSuccess ? CUDAL2_OK : CUDAL2_LAUNCH_FAILED;
}

}  // namespace cudal2

// Defines the exported descriptor of one kernel. NAME is a bare identifier equal to the file stem.
#define CUDAL2_EXPORT_KERNEL(NAME, FAMILY, SM_MIN, SM_MAX, DTYPE, LAYOUT, HAS_BIAS, CAN_IMPLEMENT, WORKSPACE, LAUNCH) \
  extern "C" const cudal2_kernel* cudal2_kernel_##NAME(void) {                                                        \
    static const cudal2_kernel k = {CUDAL2_ABI_VERSION, #NAME, FAMILY, SM_MIN, SM_MAX, DTYPE, LAYOUT, HAS_BIAS,        \
                                    CAN_IMPLEMENT, WORKSPACE, LAUNCH};                                                \
    return &k;                                                                                                        \
  }

#endif  // CUDAL2_KERNEL_EXPORT_H_
