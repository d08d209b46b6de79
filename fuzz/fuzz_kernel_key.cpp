// libFuzzer target: the kernel-key parser (moejit::KernelKey::parse, used by `moejit inspect` and cache
// manifests). A parsed key prints back to a string that parses to the same key; a key that normalizes
// generates source or throws moejit::Error. Nothing else may happen.
#include <cstdint>
#include <cstdlib>
#include <string>

#include "moejit/error.hpp"
#include "moejit/generator.hpp"
#include "moejit/key.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  moejit::KernelKey k;
  try {
    k = moejit::KernelKey::parse(text);
  } catch (const moejit::Error&) {
    return 0;
  }
  if (moejit::KernelKey::parse(k.str()) != k) std::abort();
  try {
    const moejit::KernelKey n = k.normalized();
    if (n.normalized() != n) std::abort();
    (void)moejit::generate_source(n);
  } catch (const moejit::Error&) {
  }
  return 0;
}
