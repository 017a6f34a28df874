// Process-wide registry of kernels loaded from kernel libraries (dlopen of `libcudal2_kernels.so` and others).
#pragma once

#include <mutex>
#include <string>
#include <unordered_map>
#include <vector>

#include "cudal2/abi.h"

namespace cudal2 {

class KernelRegistry {
 public:
  static KernelRegistry& instance();

  // Loads every kernel of the library at `path`; returns how many were added. Throws std::runtime_error when the
  // library cannot be opened or lacks the index symbols. A kernel name already present is replaced.
  int load_library(const std::string& path);

  // The kernel called `name`, or nullptr.
  const cudal2_kernel* find(const std::string& name) const;

  // Whether `kernel`'s binary can run on a device of compute capability `cc` (major*10+minor).
  bool runnable_on(const cudal2_kernel* kernel, int cc) const;

  std::vector<std::string> names() const;
  std::vector<std::string> libraries() const;

 private:
  struct Entry {
    const cudal2_kernel* kernel;
    std::vector<int> archs;  // targets compiled into the kernel's library, e.g. {80, 90}
  };
  mutable std::mutex mutex_;
  std::unordered_map<std::string, Entry> kernels_;
  std::vector<std::string> libraries_;
};

}  // namespace cudal2
