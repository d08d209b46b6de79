#pragma once
// Loaded modules of one runtime, keyed by kernel key. Modules stay loaded for the life of the runtime
// (captured CUDA graphs may reference their functions). Thread-safe: lookups of loaded kernels take a
// short lock; compiling and loading run outside it, once per key however many threads ask. Loading and
// unloading use the calling thread's current context: the owner makes the runtime's context current
// around every call and around destruction, and destroys the registry only once no call is running.
#include <cuda.h>

#include <future>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "moejit/kernel_cache.hpp"

namespace moejit::detail {

class ModuleRegistry {
 public:
  explicit ModuleRegistry(KernelCache& cache) : cache_(cache) {}
  ~ModuleRegistry();
  // Function `entry_suffix` appended to the key's entry name. When the module is not loaded yet and
  // `stream` is being captured into a graph, throws (compiling or loading during capture would break
  // the capture); otherwise compiles or reads the cubin through the cache and loads it. A call that
  // finds the module loading on another thread waits for that load and shares its result or error.
  CUfunction function(const KernelKey& key, CUstream stream, const std::string& entry_suffix = "");
  // Loads (compiling when needed) without launching anything.
  void preload(const KernelKey& key);

 private:
  CUmodule module_for(const KernelKey& key, CUstream stream);
  KernelCache& cache_;
  // Guards the maps only, never a compile or a driver call that can take long: forward looks its
  // functions up on every launch, from any thread.
  std::mutex mu_;
  std::map<std::string, CUmodule> modules_;                      // loaded
  std::map<std::string, std::shared_future<CUmodule>> loading_;  // load in flight (removed when it ends)
  std::map<std::string, CUfunction> functions_;
};

}  // namespace moejit::detail
