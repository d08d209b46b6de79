#pragma once
// A kernel without a key: NVRTC-compiled from a GeneratedSource for one architecture, loaded into the
// current context and unloaded with its owner (in that same context, whichever is current by then);
// never cached. For measuring instruments and probes (the bench's read floor, the grid-barrier test);
// the decode kernels go through ModuleRegistry.
#include <cuda.h>

#include "moejit/generator.hpp"
#include "moejit/types.hpp"

namespace moejit::detail {

class StandaloneKernel {
 public:
  // Compiles src (entry src.entry) and loads it; throws moejit::Error with the NVRTC log when the
  // source does not compile, or naming the driver call that failed. A context must be current.
  StandaloneKernel(const GeneratedSource& src, Arch arch);
  ~StandaloneKernel();
  StandaloneKernel(const StandaloneKernel&) = delete;
  StandaloneKernel& operator=(const StandaloneKernel&) = delete;

  CUfunction function() const { return function_; }

 private:
  CUcontext context_ = nullptr;  // current at load: where the module lives and is unloaded
  CUmodule module_ = nullptr;
  CUfunction function_ = nullptr;
};

}  // namespace moejit::detail
