// libFuzzer target: the safetensors container parser (moejit::parse_safetensors). Any input must either
// parse, with every tensor's bytes inside the buffer and a re-serialization that parses back to the same
// tensors, or throw moejit::Error; a crash, hang, leak or sanitizer report is a finding.
#include <cstdint>
#include <cstdlib>
#include <vector>

#include "moejit/error.hpp"
#include "moejit/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::vector<uint8_t> bytes(data, data + size);
  moejit::SafetensorsFile f;
  try {
    f = moejit::parse_safetensors(bytes, "fuzz");
  } catch (const moejit::Error&) {
    return 0;
  }
  // Whatever was accepted writes back out and reads back the same (the writer validates too).
  try {
    const moejit::SafetensorsFile g = moejit::parse_safetensors(moejit::serialize_safetensors(f), "round trip");
    if (g.metadata != f.metadata || g.tensors.size() != f.tensors.size()) std::abort();
    for (const auto& [name, t] : f.tensors) {
      const auto& u = g.tensors.at(name);
      if (u.dtype != t.dtype || u.shape != t.shape || u.data != t.data) std::abort();
    }
  } catch (const moejit::Error&) {
    // The writer refuses a tensor named __metadata__ only; the reader never yields one.
    std::abort();
  }
  return 0;
}
