// Per-(device, stream) workspace cache.
#include "workspace.h"

#include <c10/cuda/CUDACachingAllocator.h>

#include <map>
#include <mutex>
#include <utility>

namespace cudal2 {

Workspace workspace_for(int device, cudaStream_t stream) {
  static std::mutex mutex;
  // Leaked on purpose: freeing at exit would run after the caching allocator is gone.
  static auto* cache = new std::map<std::pair<int, cudaStream_t>, c10::DataPtr>();
  std::lock_guard<std::mutex> lock(mutex);
  auto key = std::make_pair(device, stream);
  auto it = cache->find(key);
  if (it == cache->end()) {
    it = cache->emplace(key, c10::cuda::CUDACachingAllocator::get()->allocate(kWorkspaceBytes)).first;
  }
  return {it->second.get(), kWorkspaceBytes};
}

}  // namespace cudal2
