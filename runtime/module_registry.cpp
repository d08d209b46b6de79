#include "runtime/module_registry.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
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
  dump_trace_records(modules_);
  for (auto& [k, m] : modules_) report_cleanup(driver().cuModuleUnload(m), "cuModuleUnload");
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
