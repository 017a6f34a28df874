// Programmatic dependent launch (PDL, sm_90+) between a GEMM kernel and its own follow-up kernel (the split-K /
// stream-K reduction): the GEMM calls pdl_launch_dependents() once its CTAs have issued their first loads, the
// follow-up calls pdl_wait_prerequisites() before reading the GEMM's partials, and the host enqueues the follow-up
// with launch_programmatic(), so that its launch latency overlaps the GEMM. Torch-free.
#ifndef CUDAL2_PDL_CUH_
#define CUDAL2_PDL_CUH_

#include <cuda_runtime.h>

#include "cudal2/device_caps.h"

namespace cudal2 {

// Lets the next kernel on the stream be scheduled once every CTA of this grid has called it (no-op before sm_90).
__device__ __forceinline__ void pdl_launch_dependents() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.launch_dependents;\n" ::: "memory");
#endif
}

// Waits until the preceding grid on the stream has completed and its memory operations are visible.
__device__ __forceinline__ void pdl_wait_prerequisites() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;\n" ::: "memory");
#endif
}

// Enqueues kernel<<<grid, block, 0, stream>>>(args...) as a programmatic dependent launch on sm_90+ devices, as a
// plain launch on older ones. The kernel must call pdl_wait_prerequisites() before reading its predecessor's output.
template <class... Params, class... Args>
cudaError_t launch_programmatic(void (*kernel)(Params...), dim3 grid, dim3 block, cudaStream_t stream,
                                Args&&... args) {
  const int major = current_device_major();
  if (major == 0) return cudaErrorInvalidDevice;
  cudaLaunchAttribute pdl;
  pdl.id = cudaLaunchAttributeProgrammaticStreamSerialization;
  pdl.val.programmaticStreamSerializationAllowed = 1;
  cudaLaunchConfig_t config = {};
  config.gridDim = grid;
  config.blockDim = block;
  config.stream = stream;
  config.attrs = &pdl;
  config.numAttrs = major >= 9 ? 1 : 0;
  return cudaLaunchKernelEx(&config, kernel, static_cast<Args&&>(args)...);
}

}  // namespace cudal2

#endif  // CUDAL2_PDL_CUH_
