#include "runtime/standalone_kernel.hpp"

#include "moejit/compiler.hpp"
#include "runtime/driver_api.hpp"

namespace moejit::detail {

StandaloneKernel::StandaloneKernel(const GeneratedSource& src, Arch arch) {
  const CompileOutput bin = compile_source(src, arch);
  check(driver().cuModuleLoadData(&module_, bin.binary.data()), "cuModuleLoadData");
  const CUresult r = driver().cuModuleGetFunction(&function_, module_, src.entry.c_str());
  if (r != CUDA_SUCCESS) {
    driver().cuModuleUnload(module_);  // the destructor does not run for a throwing constructor
    check(r, "cuModuleGetFunction");
  }
}

StandaloneKernel::~StandaloneKernel() {
  if (module_) driver().cuModuleUnload(module_);
}

}  // namespace moejit::detail
