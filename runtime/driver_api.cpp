#include "runtime/driver_api.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <mutex>

#include "moejit/error.hpp"

namespace moejit::detail {

namespace {
#define MOEJIT_STR2(x) #x
#define MOEJIT_STR(x) MOEJIT_STR2(x)

struct Loaded {
  DriverApi api;
  std::string error;  // empty when loaded
};

Loaded load() {
  Loaded l;
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    l.error = fmt::format("cannot load the CUDA driver libcuda.so.1 ({})", e ? e : "unknown error");
    return l;
  }
  // cuda.h maps e.g. cuMemAlloc to cuMemAlloc_v2; stringizing after expansion resolves that symbol.
#define MOEJIT_DRIVER_FN(name)                                                          \
  l.api.name = reinterpret_cast<decltype(&::name)>(dlsym(h, MOEJIT_STR(name)));        \
  if (!l.api.name) {                                                                    \
    l.error = fmt::format("the CUDA driver lacks {} (driver too old?)", MOEJIT_STR(name)); \
    return l;                                                                           \
  }
#include "runtime/driver_functions.inc"
#undef MOEJIT_DRIVER_FN
  CUresult r = l.api.cuInit(0);
  if (r != CUDA_SUCCESS) {
    const char* name = nullptr;
    l.api.cuGetErrorName(r, &name);
    l.error = fmt::format("cuInit failed: {}", name ? name : "unknown");
  }
  return l;
}

const Loaded& loaded() {
  static const Loaded l = load();
  return l;
}
}  // namespace

const DriverApi& driver() {
  const Loaded& l = loaded();
  if (!l.error.empty()) throw Error(l.error);
  return l.api;
}

bool driver_available(std::string* why) {
  const Loaded& l = loaded();
  if (!l.error.empty()) {
    if (why) *why = l.error;
    return false;
  }
  int n = 0;
  if (l.api.cuDeviceGetCount(&n) != CUDA_SUCCESS || n == 0) {
    if (why) *why = "the CUDA driver reports no device";
    return false;
  }
  return true;
}

std::string error_string(CUresult r) {
  const char* name = nullptr;
  const char* desc = nullptr;
  const Loaded& l = loaded();
  if (l.error.empty()) {
    l.api.cuGetErrorName(r, &name);
    l.api.cuGetErrorString(r, &desc);
  }
  return fmt::format("{}: {}", name ? name : fmt::format("CUresult {}", static_cast<int>(r)),
                     desc ? desc : "no description");
}

void check(CUresult r, const char* what) {
  if (r != CUDA_SUCCESS) throw Error(fmt::format("{} failed: {}", what, error_string(r)));
}

}  // namespace moejit::detail
