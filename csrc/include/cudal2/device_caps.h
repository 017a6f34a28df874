// Host-side facts about the current CUDA device that launchers consult on every call, cached per device.
// Torch-free.
#ifndef CUDAL2_DEVICE_CAPS_H_
#define CUDAL2_DEVICE_CAPS_H_

#include <cuda_runtime.h>

#include <atomic>

namespace cudal2 {

// Compute capability major of the current device (e.g. 9 on H100/H200), 0 when it cannot be queried. The attribute
// is read once per device; later calls cost one cudaGetDevice.
inline int current_device_major() {
  constexpr int kMaxDevices = 64;
  static std::atomic<int> cached[kMaxDevices];  // 0 = not queried yet
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) return 0;
  const bool cacheable = device >= 0 && device < kMaxDevices;
  if (cacheable) {
    const int major = cached[device].load(std::memory_order_relaxed);
    if (major != 0) return major;
  }
  int major = 0;
  if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device) != cudaSuccess) return 0;
  if (cacheable) cached[device].store(major, std::memory_order_relaxed);
  return major;
}

}  // namespace cudal2

#endif  // CUDAL2_DEVICE_CAPS_H_
