// libFuzzer target: the input-file loader (moejit::read_input_file) on a real file. Accepted inputs
// hold exactly M*H activations and M*K ids and weights; everything else throws moejit::Error.
#include <cstdint>
#include <cstdlib>

#include "fuzz/fuzz_support.hpp"
#include "moejit/error.hpp"
#include "moejit/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static moejit_fuzz::MemFile file;
  const std::string path = file.hold(data, size);
  try {
    const moejit::HostInputs in = moejit::read_input_file(path);
    const size_t m = static_cast<size_t>(in.tokens), h = static_cast<size_t>(in.hidden), k = static_cast<size_t>(in.top_k);
    if (in.tokens < 0 || in.hidden < 0 || in.top_k < 0 || in.x.size() != m * h || in.topk_ids.size() != m * k ||
        in.topk_weights.size() != m * k)
      std::abort();
  } catch (const moejit::Error&) {
  }
  return 0;
}
