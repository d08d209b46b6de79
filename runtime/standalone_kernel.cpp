#include "runtime/standalone_kernel.hpp"

#include "moejit/compiler.hpp"
#include "runtime/driver_api.hpp"

namespace moejit::detail {

StandaloneKernel::StandaloneKernel(const GeneratedSource& src, Arch arch) {
  const CompileOutput bin = compile_source(src, arch);
  check(driver().cuModuleLoadData(&module_, bin.binary.data()), "cuModuleLoadData");
  const CUresult r = driver().cuModuleGetFunction(&function_, module_, src.entry.c_str());
  if (r != CUDA_SUCCESS) {
    // The destructor does not run for a throwing constructor.
    report_cleanup(driver().cuModuleUnload(module_), "cuModuleUnload");
    check(r, "cuModuleGetFunction");
  }
}

StandaloneKernel::~StandaloneKernel() {
  if (module_) report_cleanup(driver().cuModuleUnload(module_), "cuModuleUnload");
}

}  // namespace moejit::detail
