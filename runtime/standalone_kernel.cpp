#include "runtime/standalone_kernel.hpp"

#include <new>

#include "moejit/compiler.hpp"
#include "runtime/context.hpp"
#include "runtime/driver_api.hpp"

namespace moejit::detail {

StandaloneKernel::StandaloneKernel(const GeneratedSource& src, Arch arch) {
  const CompileOutput bin = compile_source(src, arch);
  // The module belongs to the context it is loaded into; the destructor may run on a thread (or at a
  // moment) where another context, or none, is current.
  check(driver().cuCtxGetCurrent(&context_), "cuCtxGetCurrent");
  check(driver().cuModuleLoadData(&module_, bin.binary.data()), "cuModuleLoadData");
  const CUresult r = driver().cuModuleGetFunction(&function_, module_, src.entry.c_str());
  if (r != CUDA_SUCCESS) {
    // The destructor does not run for a throwing constructor. The load just ran in context_.
    report_cleanup(driver().cuModuleUnload(module_), "cuModuleUnload");
    check(r, "cuModuleGetFunction");
  }
}

StandaloneKernel::~StandaloneKernel() {
  if (!module_) return;
  ScopedContext in(context_, std::nothrow);
  report_cleanup(driver().cuModuleUnload(module_), "cuModuleUnload");
}

}  // namespace moejit::detail
