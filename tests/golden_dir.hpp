#pragma once
// Where the golden layers of the design contract live: $MOEJIT_GOLDEN_DIR, else the path configured
// at build time (../shared/golden beside the checkout).
#include <array>
#include <cstdlib>
#include <string>

namespace moejit::test {
inline std::string golden_dir() {
  if (const char* env = std::getenv("MOEJIT_GOLDEN_DIR"); env && *env) return env;
  return MOEJIT_GOLDEN_DIR;
}

// The five golden layers of ../shared/golden (see its README).
inline constexpr std::array<const char*, 5> kGoldenLayers = {
    "nvfp4_silu", "mxfp4_swigluoai_bias_ep", "nvfp4_relu2", "mxfp4_gelu_interleaved", "nvfp4_silu_limit_upgate"};
}  // namespace moejit::test
