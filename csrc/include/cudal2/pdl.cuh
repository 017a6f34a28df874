// Device side of programmatic dependent launch (PDL, sm_90+; no-ops before): a kernel calls pdl_launch_dependents()
// once its CTAs have issued their first loads, so that the next kernel on the stream may get scheduled, and a kernel
// launched with PDL (launch.cuh) calls pdl_wait_prerequisites() before it touches anything the preceding kernel may
// read or write. Torch-free.
#ifndef CUDAL2_PDL_CUH_
#define CUDAL2_PDL_CUH_

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

}  // namespace cudal2

#endif  // CUDAL2_PDL_CUH_
