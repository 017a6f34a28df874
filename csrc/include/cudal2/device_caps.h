// Host-side facts about the current CUDA device that launchers consult on every call, cached per device.
// Torch-free.
#ifndef CUDAL2_DEVICE_CAPS_H_
#define CUDAL2_DEVICE_CAPS_H_

#include <cuda_runtime.h>

#include <atomic>

namespace cudal2 {

constexpr int kMaxCachedDevices = 64;  // devices whose facts are cached (others are queried on every call)

// Attribute `kAttr` of the current device, 0 when it cannot be queried. Read once per device (values must be
// non-zero to be cached); later calls cost one cudaGetDevice.
template <cudaDeviceAttr kAttr>
int current_device_attribute() {
  static std::atomic<int> cached[kMaxCachedDevices];  // 0 = not queried yet
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  const bool cacheable = device >= 0 && device < kMaxCachedDevices;
  if (cacheable) {
    const int value = cached[device].load(std::memory_order_relaxed);
    if (value != 0) return value;
  }
  int value = 0;
  if (cudaDeviceGetAttribute(&value, kAttr, device) != cudaSuccess) return 0;
  if (cacheable) cached[device].store(value, std::memory_order_relaxed);
  return value;
}

// Compute capability major of the current device (e.g. 9 on H100/H200), 0 when it cannot be queried.
inline int current_device_major() { return current_device_attribute<cudaDevAttrComputeCapabilityMajor>(); }

// Multiprocessor count of the current device (132 on H200), 0 when it cannot be queried.
inline int current_device_sm_count() { return current_device_attribute<cudaDevAttrMultiProcessorCount>(); }

// Opt-in shared memory per block of the current device (227 KiB on sm_90), 0 when it cannot be queried.
inline int current_device_smem_optin() { return current_device_attribute<cudaDevAttrMaxSharedMemoryPerBlockOptin>(); }

}  // namespace cudal2

#endif  // CUDAL2_DEVICE_CAPS_H_
