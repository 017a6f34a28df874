// Per-(device, stream) workspace cache.
#include "workspace.h"

#include <c10/cuda/CUDACachingAllocator.h>

#include <map>
#include <mutex>
#include <utility>

namespace cudal2 {

Workspace workspace_for(int device, cudaStream_t stream) {
  thread_local int last_device = -1;
  thread_local cudaStream_t last_stream = nullptr;
  thread_local Workspace last{nullptr, 0};
  if (device == last_device && stream == last_stream) return last;  // workspaces are never freed
  static std::mutex mutex;
  // Leaked on purpose: freeing at exit would run after the caching allocator is gone.
  static auto* cache = new std::map<std::pair<int, cudaStream_t>, c10::DataPtr>();
  std::lock_guard<std::mutex> lock(mutex);
  auto key = std::make_pair(device, stream);
  auto it = cache->find(key);
  if (it == cache->end()) {
    it = cache->emplace(key, c10::cuda::CUDACachingAllocator::get()->allocate(kWorkspaceBytes)).first;
  }
  last_device = device;
  last_stream = stream;
  last = {it->second.get(), kWorkspaceBytes};
  return last;
}

}  // namespace cudal2
