// Host-side facts about the current CUDA device that launchers consult on every call, cached per device.
// Torch-free.
#ifndef CUDAL2_DEVICE_CAPS_H_
#define CUDAL2_DEVICE_CAPS_H_

#include <cuda_runtime.h>

#include <atomic>

namespace cudal2 {

// Attribute `kAttr` of the current device, 0 when it cannot be queried. Read once per device (values must be
// non-zero to be cached); later calls cost one cudaGetDevice.
template <cudaDeviceAttr kAttr>
int current_device_attribute() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cached[kMaxDevices];  // 0 = not queried yet
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  const bool cacheable = device >= 0 && device < kMaxDevices;
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

// L2 cache bytes of the current device (e.g. 60 MiB on H200), 0 when it cannot be queried.
inline int current_device_l2_bytes() { return current_device_attribute<cudaDevAttrL2CacheSize>(); }

}  // namespace cudal2

#endif  // CUDAL2_DEVICE_CAPS_H_
