// Main of the GPU test executables. A machine without a GPU (no libcuda.so.1, or no device) exits 77,
// which CTest reports as skipped, with the reason; a GPU machine whose driver fails (cuInit or
// cuDeviceGetCount erring otherwise, a missing entry point) fails instead, so a broken driver cannot
// pass as "no GPU". MOEJIT_REQUIRE_GPU=1 (for runs on a GPU machine) turns the skip into a failure too.
#define CATCH_CONFIG_RUNNER
#include "catch_compat.hpp"

#include <cstdio>
#include <cstdlib>
#include <string>

#include "runtime/driver_api.hpp"

int main(int argc, char** argv) {
  using moejit::detail::DriverState;
  std::string why;
  const DriverState state = moejit::detail::driver_state(&why);
  if (state == DriverState::broken) {
    std::printf("FAILED: the CUDA driver is present but unusable (%s)\n", why.c_str());
    return 1;
  }
  if (state != DriverState::usable) {
    const char* require = std::getenv("MOEJIT_REQUIRE_GPU");
    if (require && *require && std::string(require) != "0") {
      std::printf("FAILED: MOEJIT_REQUIRE_GPU is set but no GPU is usable (%s)\n", why.c_str());
      return 1;
    }
    std::printf("SKIPPED: no usable GPU (%s); GPU tests need a CUDA device and libcuda.so.1\n", why.c_str());
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
