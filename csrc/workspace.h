// Scratch memory shared by cuBLASLt and table kernels: 32 MiB per (device, stream), allocated once through the
// torch caching allocator (so it also works inside CUDA-graph capture), never freed per call.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>

namespace cudal2 {

constexpr size_t kWorkspaceBytes = 32u << 20;

struct Workspace {
  void* ptr;
  size_t bytes;
};

// The workspace of (device, stream); allocated on first use.
Workspace workspace_for(int device, cudaStream_t stream);

}  // namespace cudal2
