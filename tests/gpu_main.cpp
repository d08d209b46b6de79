// Main of the GPU test executables: exits 77 (CTest: skipped) with the reason when no GPU is usable.
#define CATCH_CONFIG_RUNNER
#include <catch2/catch.hpp>

#include <cstdio>
#include <string>

#include "moejit/runtime.hpp"

int main(int argc, char** argv) {
  std::string why;
  if (!moejit::gpu_available(&why)) {
    std::printf("SKIPPED: no usable GPU (%s); GPU tests need a CUDA device and libcuda.so.1\n", why.c_str());
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
