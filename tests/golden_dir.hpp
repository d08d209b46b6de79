#pragma once
// Where the golden layers of the design contract live: $MOEJIT_GOLDEN_DIR, else the path configured
// at build time (../shared/golden beside the checkout).
#include <cstdlib>
#include <string>

namespace moejit::test {
inline std::string golden_dir() {
  if (const char* env = std::getenv("MOEJIT_GOLDEN_DIR"); env && *env) return env;
  return MOEJIT_GOLDEN_DIR;
}
}  // namespace moejit::test
