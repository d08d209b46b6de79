#include "runtime/driver_api.hpp"

#include <dlfcn.h>
#include <fmt/format.h>

#include <cstdio>
#include <mutex>

#include "moejit/error.hpp"

namespace moejit::detail {

namespace {
#define MOEJIT_STR2(x) #x
#define MOEJIT_STR(x) MOEJIT_STR2(x)

struct Loaded {
  DriverApi api;
  std::string error;  // empty when loaded
  // Why loading failed, for driver_state: no libcuda.so.1 or no device is a machine without a GPU; any
  // other failure (a missing entry point, cuInit failing otherwise) is a GPU machine with a broken driver.
  DriverState state = DriverState::usable;
};

Loaded load() {
  Loaded l;
  void* h = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!h) {
    const char* e = dlerror();
    l.error = fmt::format("cannot load the CUDA driver libcuda.so.1 ({})", e ? e : "unknown error");
    l.state = DriverState::no_driver;
    return l;
  }
  // cuda.h maps e.g. cuMemAlloc to cuMemAlloc_v2; stringizing after expansion resolves that symbol.
#define MOEJIT_DRIVER_FN(name)                                                          \
  l.api.name = reinterpret_cast<decltype(&::name)>(dlsym(h, MOEJIT_STR(name)));        \
  if (!l.api.name) {                                                                    \
    l.error = fmt::format("the CUDA driver lacks {} (driver too old?)", MOEJIT_STR(name)); \
    l.state = DriverState::broken;                                                      \
    return l;                                                                           \
  }
#include "runtime/driver_functions.inc"
#undef MOEJIT_DRIVER_FN
  CUresult r = l.api.cuInit(0);
  if (r != CUDA_SUCCESS) {
    const char* name = nullptr;
    l.api.cuGetErrorName(r, &name);
    l.error = fmt::format("cuInit failed: {}", name ? name : "unknown");
    l.state = r == CUDA_ERROR_NO_DEVICE ? DriverState::no_device : DriverState::broken;
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

DriverState driver_state(std::string* why) {
  const Loaded& l = loaded();
  if (!l.error.empty()) {
    if (why) *why = l.error;
    return l.state;
  }
  int n = 0;
  const CUresult r = l.api.cuDeviceGetCount(&n);
  if (r != CUDA_SUCCESS) {
    const char* name = nullptr;
    l.api.cuGetErrorName(r, &name);
    if (why) *why = fmt::format("cuDeviceGetCount failed: {}", name ? name : "unknown");
    return DriverState::broken;
  }
  if (n == 0) {
    if (why) *why = "the CUDA driver reports no device";
    return DriverState::no_device;
  }
  return DriverState::usable;
}

bool driver_available(std::string* why) { return driver_state(why) == DriverState::usable; }

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

bool report_cleanup(CUresult r, const char* what) noexcept {
  if (r == CUDA_SUCCESS) return true;
  if (r == CUDA_ERROR_DEINITIALIZED) return false;
  const char* name = nullptr;
  const Loaded& l = loaded();  // already loaded: something was created through it
  if (l.error.empty()) l.api.cuGetErrorName(r, &name);
  if (name)
    std::fprintf(stderr, "moejit: %s failed during cleanup: %s\n", what, name);
  else
    std::fprintf(stderr, "moejit: %s failed during cleanup: CUresult %d\n", what, static_cast<int>(r));
  return false;
}

}  // namespace moejit::detail
