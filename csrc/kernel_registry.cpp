// Loads kernel libraries through dlopen and indexes their kernels by name.
#include "kernel_registry.h"

#include <dlfcn.h>

#include <sstream>
#include <stdexcept>

namespace cudal2 {
namespace {

// "80;90;90a" -> {80, 90, 90}
std::vector<int> parse_archs(const char* text) {
  std::vector<int> archs;
  std::stringstream ss(text ? text : "");
  std::string item;
  while (std::getline(ss, item, ';')) {
    if (!item.empty()) archs.push_back(std::stoi(item));
  }
  return archs;
}

}  // namespace

KernelRegistry& KernelRegistry::instance() {
  static KernelRegistry registry;
  return registry;
}

int KernelRegistry::load_library(const std::string& path) {
  void* handle = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    throw std::runtime_error("cudal2: cannot load kernel library " + path + ": " + dlerror());
  }
  auto index = reinterpret_cast<cudal2_kernel_library_fn>(dlsym(handle, CUDAL2_KERNEL_LIBRARY_SYMBOL));
  auto archs_fn = reinterpret_cast<cudal2_kernel_library_archs_fn>(dlsym(handle, CUDAL2_KERNEL_LIBRARY_ARCHS_SYMBOL));
  if (index == nullptr || archs_fn == nullptr) {
    throw std::runtime_error("cudal2: " + path + " is not a cudal2 kernel library (missing " +
                             CUDAL2_KERNEL_LIBRARY_SYMBOL + ")");
  }
  const std::vector<int> archs = parse_archs(archs_fn());
  int count = 0;
  const cudal2_kernel* const* kernels = index(&count);
  std::lock_guard<std::mutex> lock(mutex_);
  int added = 0;
  for (int i = 0; i < count; ++i) {
    const cudal2_kernel* k = kernels[i];
    if (k == nullptr || k->abi_version != CUDAL2_ABI_VERSION) {
      throw std::runtime_error("cudal2: " + path + " holds a kernel of another ABI version");
    }
    kernels_[k->name] = Entry{k, archs};
    ++added;
  }
  libraries_.push_back(path);
  return added;  // the handle stays open for the life of the process: kernels point into it
}

const cudal2_kernel* KernelRegistry::find(const std::string& name) const {
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = kernels_.find(name);
  return it == kernels_.end() ? nullptr : it->second.kernel;
}

bool KernelRegistry::runnable_on(const cudal2_kernel* kernel, int cc) const {
  if (kernel == nullptr || cc < kernel->sm_min || cc > kernel->sm_max) return false;
  std::lock_guard<std::mutex> lock(mutex_);
  auto it = kernels_.find(kernel->name);
  if (it == kernels_.end()) return false;
  for (int arch : it->second.archs) {
    if (arch / 10 == cc / 10 && arch <= cc) return true;  // same major, binary-compatible
  }
  return false;
}

std::vector<std::string> KernelRegistry::names() const {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<std::string> out;
  for (const auto& kv : kernels_) out.push_back(kv.first);
  return out;
}

std::vector<std::string> KernelRegistry::libraries() const {
  std::lock_guard<std::mutex> lock(mutex_);
  return libraries_;
}

}  // namespace cudal2
