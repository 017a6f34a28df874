// Host-side kernel launch with the sm_90 launch attributes the families use: thread-block clusters and
// programmatic dependent launch (PDL). Torch-free.
//
// PDL lets a kernel be scheduled while the preceding kernel on the stream finishes; the kernel must call
// pdl_wait_prerequisites() (pdl.cuh) before it reads or writes anything the preceding kernel may touch.
// CUDAL2_DISABLE_PDL=1 in the environment turns it off for every family except a GEMM's own follow-up kernel
// (split-K reduction), which overlaps only its producer.
#ifndef CUDAL2_LAUNCH_CUH_
#define CUDAL2_LAUNCH_CUH_

#include <cuda_runtime.h>

#include <atomic>
#include <cstdlib>

#include "cudal2/device_caps.h"

namespace cudal2 {

// False when CUDAL2_DISABLE_PDL=1 (read once): GEMM kernels then launch behind the preceding kernel as usual.
inline bool pdl_allowed() {
  static const bool allowed = [] {
    const char* v = std::getenv("CUDAL2_DISABLE_PDL");
    return v == nullptr || v[0] == '\0' || v[0] == '0';
  }();
  return allowed;
}

// Lets `kKernel` launch with `bytes` of dynamic shared memory on the current device (an opt-in above 48 KiB). The
// attribute is set once per device; later calls cost one cudaGetDevice.
template <auto kKernel>
cudaError_t allow_dynamic_smem(size_t bytes) {
  if (bytes <= 48 * 1024) return cudaSuccess;
  static std::atomic<bool> done[kMaxCachedDevices];
  int device = 0;
  cudaError_t err = cudaGetDevice(&device);
  if (err != cudaSuccess) return err;
  const bool cacheable = device >= 0 && device < kMaxCachedDevices;
  if (cacheable && done[device].load(std::memory_order_acquire)) return cudaSuccess;
  err = cudaFuncSetAttribute(kKernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(bytes));
  if (err == cudaSuccess && cacheable) done[device].store(true, std::memory_order_release);
  return err;
}

// Shape and attributes of one launch. Clusters and PDL need sm_90+: PDL is dropped on older devices, clusters must
// only be requested where cluster_splitk_available() (or an equivalent check) said yes.
struct LaunchSpec {
  dim3 grid, block;
  size_t smem_bytes = 0;
  dim3 cluster = dim3(1, 1, 1);  // CTAs per thread-block cluster; (1, 1, 1) = no cluster attribute
  bool programmatic = false;     // programmatic dependent launch
};

// Enqueues kernel<<<spec.grid, spec.block, spec.smem_bytes, stream>>>(args...) with the attributes of `spec`.
template <class... Params, class... Args>
cudaError_t launch_kernel(void (*kernel)(Params...), const LaunchSpec& spec, cudaStream_t stream, Args&&... args) {
  cudaLaunchAttribute attrs[2];
  unsigned count = 0;
  if (spec.cluster.x * spec.cluster.y * spec.cluster.z > 1) {
    attrs[count].id = cudaLaunchAttributeClusterDimension;
    attrs[count].val.clusterDim.x = spec.cluster.x;
    attrs[count].val.clusterDim.y = spec.cluster.y;
    attrs[count].val.clusterDim.z = spec.cluster.z;
    ++count;
  }
  if (spec.programmatic) {
    const int major = current_device_major();
    if (major == 0) return cudaErrorInvalidDevice;
    if (major >= 9) {
      attrs[count].id = cudaLaunchAttributeProgrammaticStreamSerialization;
      attrs[count].val.programmaticStreamSerializationAllowed = 1;
      ++count;
    }
  }
  cudaLaunchConfig_t config = {};
  config.gridDim = spec.grid;
  config.blockDim = spec.block;
  config.dynamicSmemBytes = spec.smem_bytes;
  config.stream = stream;
  config.attrs = attrs;
  config.numAttrs = count;
  return cudaLaunchKernelEx(&config, kernel, static_cast<Args&&>(args)...);
}

}  // namespace cudal2

#endif  // CUDAL2_LAUNCH_CUH_
