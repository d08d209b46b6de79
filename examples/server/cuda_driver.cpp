// Resolves the server's driver calls from libcuda.so.1 (cuda_driver.hpp).
#include "cuda_driver.hpp"

#include <dlfcn.h>

#include <stdexcept>

namespace server {
namespace {

// Two steps so that a macro argument (cuStreamDestroy) expands to its versioned name first.
#define SERVER_NAME_OF(x) #x
#define SERVER_VERSIONED(x) SERVER_NAME_OF(x)

template <class Fn>
void resolve(void* lib, Fn& fn, const char* name) {
  fn = reinterpret_cast<Fn>(dlsym(lib, name));
  if (!fn) throw std::runtime_error(std::string("libcuda.so.1 has no ") + name + " (driver too old?)");
}

Driver load() {
  void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib) throw std::runtime_error("cannot load libcuda.so.1 (no NVIDIA driver)");
  Driver d;
  resolve(lib, d.cuGetErrorString, SERVER_VERSIONED(cuGetErrorString));
  resolve(lib, d.cuCtxGetCurrent, SERVER_VERSIONED(cuCtxGetCurrent));
  resolve(lib, d.cuCtxSetCurrent, SERVER_VERSIONED(cuCtxSetCurrent));
  resolve(lib, d.cuStreamCreate, SERVER_VERSIONED(cuStreamCreate));
  resolve(lib, d.cuStreamDestroy, SERVER_VERSIONED(cuStreamDestroy));
  resolve(lib, d.cuStreamSynchronize, SERVER_VERSIONED(cuStreamSynchronize));
  resolve(lib, d.cuStreamBeginCapture, SERVER_VERSIONED(cuStreamBeginCapture));
  resolve(lib, d.cuStreamEndCapture, SERVER_VERSIONED(cuStreamEndCapture));
  resolve(lib, d.cuGraphInstantiateWithFlags, SERVER_VERSIONED(cuGraphInstantiateWithFlags));
  resolve(lib, d.cuGraphLaunch, SERVER_VERSIONED(cuGraphLaunch));
  resolve(lib, d.cuGraphExecDestroy, SERVER_VERSIONED(cuGraphExecDestroy));
  resolve(lib, d.cuGraphDestroy, SERVER_VERSIONED(cuGraphDestroy));
  resolve(lib, d.cuMemcpyHtoDAsync, SERVER_VERSIONED(cuMemcpyHtoDAsync));
  resolve(lib, d.cuMemcpyDtoHAsync, SERVER_VERSIONED(cuMemcpyDtoHAsync));
  return d;
}

}  // namespace

const Driver& driver() {
  static const Driver d = load();
  return d;
}

void check(CUresult r, const char* what) {
  if (r == CUDA_SUCCESS) return;
  const char* msg = nullptr;
  if (driver().cuGetErrorString(r, &msg) != CUDA_SUCCESS || !msg) msg = "unknown CUDA error";
  throw std::runtime_error(std::string(what) + ": " + msg);
}

}  // namespace server
