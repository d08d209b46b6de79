#include "runtime/module_registry.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <exception>
#include <future>
#include <utility>
#include <vector>

#include "moejit/error.hpp"
#include "runtime/driver_api.hpp"

namespace moejit::detail {

namespace {
// -DMOEJIT_TRACE=ON builds: copies each module's trace records (templates/trace.cuh) to
// $MOEJIT_TRACE_DIR/<key with ':' -> '_'>.cta.bin / .warp.bin (8 little-endian u64 per record). Best
// effort: a module without records or a failed copy is skipped.
void dump_trace_records([[maybe_unused]] const std::map<std::string, CUmodule>& modules) {
#ifdef MOEJIT_TRACE_BUILD
  const char* dir = std::getenv("MOEJIT_TRACE_DIR");
  if (!dir || !*dir) return;
  for (const auto& [key, mod] : modules)
    for (const auto& [symbol, suffix] : {std::pair{"moejit_trace_cta", "cta"}, std::pair{"moejit_trace_warp", "warp"}}) {
      CUdeviceptr p = 0;
      size_t bytes = 0;
      if (driver().cuModuleGetGlobal(&p, &bytes, mod, symbol) != CUDA_SUCCESS) continue;
      std::vector<unsigned char> records(bytes);
      if (driver().cuMemcpyDtoH(records.data(), p, bytes) != CUDA_SUCCESS) continue;
      std::string name = key;
      for (char& c : name)
        if (c == ':') c = '_';
      const std::string path = fmt::format("{}/{}.{}.bin", dir, name, suffix);
      if (FILE* f = std::fopen(path.c_str(), "wb")) {
        std::fwrite(records.data(), 1, bytes, f);
        std::fclose(f);
      }
    }
#endif
}
}  // namespace

ModuleRegistry::~ModuleRegistry() {
  // No load is in flight: the owner destroys the registry only after its last call returned.
  dump_trace_records(modules_);
  for (auto& [k, m] : modules_) report_cleanup(driver().cuModuleUnload(m), "cuModuleUnload");
}

CUmodule ModuleRegistry::module_for(const KernelKey& key, CUstream stream) {
  const std::string name = key.str();
  std::shared_future<CUmodule> pending;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = modules_.find(name); it != modules_.end()) return it->second;
    if (auto it = loading_.find(name); it != loading_.end()) pending = it->second;
  }
  // Another thread is compiling or loading it: this call adds nothing to the stream while it waits, so
  // it may wait even during a capture. get() rethrows that load's error.
  if (pending.valid()) return pending.get();

  // This call would compile or load itself. The check is a driver call, so it runs outside the lock.
  if (stream != nullptr) {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    check(driver().cuStreamIsCapturing(stream, &status), "cuStreamIsCapturing");
    if (status != CU_STREAM_CAPTURE_STATUS_NONE)
      throw Error(fmt::format(
          "kernel {} is not loaded and the stream is being captured into a CUDA graph; compiling or loading "
          "modules during capture is not allowed: call Runtime::prewarm (or run once eagerly) before capturing",
          name));
  }

  std::promise<CUmodule> promise;
  {
    std::lock_guard<std::mutex> lock(mu_);
    // Another thread may have started (or finished) the same load since the first look.
    if (auto it = modules_.find(name); it != modules_.end()) return it->second;
    if (auto it = loading_.find(name); it != loading_.end())
      pending = it->second;
    else
      loading_.emplace(name, promise.get_future().share());
  }
  if (pending.valid()) return pending.get();

  // This thread owns the load. Compiling takes up to seconds: other keys' lookups and loads go on.
  CUmodule mod = nullptr;
  try {
    auto kernel = cache_.get(key);
    CUmodule loaded = nullptr;
    check(driver().cuModuleLoadData(&loaded, kernel->cubin.data()), "cuModuleLoadData");
    mod = loaded;
    std::lock_guard<std::mutex> lock(mu_);
    modules_.emplace(name, mod);
    loading_.erase(name);
  } catch (...) {
    // A module that was loaded but could not be recorded would never be unloaded.
    if (mod) report_cleanup(driver().cuModuleUnload(mod), "cuModuleUnload");
    // Forgotten, so that a later call retries (after a prewarm, say); this attempt's waiters get its error.
    {
      std::lock_guard<std::mutex> lock(mu_);
      loading_.erase(name);
    }
    promise.set_exception(std::current_exception());
    throw;
  }
  promise.set_value(mod);
  return mod;
}

CUfunction ModuleRegistry::function(const KernelKey& key, CUstream stream, const std::string& entry_suffix) {
  const std::string fname = key.entry_name() + entry_suffix;
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (auto it = functions_.find(fname); it != functions_.end()) return it->second;
  }
  CUmodule mod = module_for(key, stream);
  CUfunction f = nullptr;
  check(driver().cuModuleGetFunction(&f, mod, fname.c_str()), "cuModuleGetFunction");
  std::lock_guard<std::mutex> lock(mu_);
  // Two threads may both have looked it up: one module, so the same handle either way.
  return functions_.emplace(fname, f).first->second;
}

void ModuleRegistry::preload(const KernelKey& key) { module_for(key, nullptr); }

}  // namespace moejit::detail
