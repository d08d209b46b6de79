#include "runtime/module_registry.hpp"

#include <fmt/format.h>

#include "moejit/error.hpp"
#include "runtime/driver_api.hpp"

namespace moejit::detail {

ModuleRegistry::~ModuleRegistry() {
  for (auto& [k, m] : modules_) driver().cuModuleUnload(m);
}

CUmodule ModuleRegistry::module_for(const KernelKey& key, CUstream stream) {
  const std::string name = key.str();
  auto it = modules_.find(name);
  if (it != modules_.end()) return it->second;
  if (stream != nullptr) {
    CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
    check(driver().cuStreamIsCapturing(stream, &status), "cuStreamIsCapturing");
    if (status != CU_STREAM_CAPTURE_STATUS_NONE)
      throw Error(fmt::format(
          "kernel {} is not loaded and the stream is being captured into a CUDA graph; compiling or loading "
          "modules during capture is not allowed: call Runtime::prewarm (or run once eagerly) before capturing",
          name));
  }
  auto kernel = cache_.get(key);
  CUmodule mod = nullptr;
  check(driver().cuModuleLoadData(&mod, kernel->cubin.data()), "cuModuleLoadData");
  modules_[name] = mod;
  return mod;
}

CUfunction ModuleRegistry::function(const KernelKey& key, CUstream stream, const std::string& entry_suffix) {
  std::lock_guard<std::mutex> lock(mu_);
  const std::string fname = key.entry_name() + entry_suffix;
  auto it = functions_.find(fname);
  if (it != functions_.end()) return it->second;
  CUmodule mod = module_for(key, stream);
  CUfunction f = nullptr;
  check(driver().cuModuleGetFunction(&f, mod, fname.c_str()), "cuModuleGetFunction");
  functions_[fname] = f;
  return f;
}

void ModuleRegistry::preload(const KernelKey& key) {
  std::lock_guard<std::mutex> lock(mu_);
  module_for(key, nullptr);
}

}  // namespace moejit::detail
