// A small per-thread cache of a kernel's launch parameters, keyed by the problem they were built from.
//
// Building CUTLASS's Params is host work on every call (TMA descriptors encoded by the driver, scheduler setup): a
// few microseconds, which an eager decode step pays on every projection. The params are a pure function of the
// problem's shape, pointers, leading dimensions, workspace, SM count and knobs, and a model's layers call the same
// problems on recurring buffers (the caching allocator hands the same blocks back step after step), so a repeat
// reuses them. Torch-free.
#ifndef CUDAL2_PARAMS_CACHE_H_
#define CUDAL2_PARAMS_CACHE_H_

#include <cstddef>
#include <vector>

#include "cudal2/abi.h"

namespace cudal2 {

// Whether two problems have the same params: every field but the stream and the workspace's size (the caller checks
// the size; the params hold only the pointer).
inline bool same_params_key(const cudal2_problem& x, const cudal2_problem& y) {
  return x.m == y.m && x.n == y.n && x.k == y.k && x.a == y.a && x.lda == y.lda && x.b == y.b && x.ldb == y.ldb &&
         x.d == y.d && x.ldd == y.ldd && x.bias == y.bias && x.dtype == y.dtype && x.layout == y.layout &&
         x.workspace == y.workspace && x.sm_count == y.sm_count && x.splits == y.splits && x.swizzle == y.swizzle &&
         x.raster == y.raster;
}

// The last kCapacity problems' params, replaced oldest first. One instance per thread (thread_local) and kernel.
template <class Params, size_t kCapacity = 32>
class ParamsCache {
 public:
  // The params of `p`: cached, or built by `build()` and cached.
  template <class Build>
  const Params& get(const cudal2_problem& p, Build&& build) {
    for (const Entry& e : entries_) {
      if (same_params_key(e.key, p)) return e.params;
    }
    if (entries_.size() < kCapacity) {
      entries_.push_back(Entry{p, build()});
      return entries_.back().params;
    }
    Entry& victim = entries_[next_];
    next_ = (next_ + 1) % kCapacity;
    victim = Entry{p, build()};
    return victim.params;
  }

 private:
  struct Entry {
    cudal2_problem key;
    Params params;
  };
  std::vector<Entry> entries_;
  size_t next_ = 0;
};

}  // namespace cudal2

#endif  // CUDAL2_PARAMS_CACHE_H_
