// libFuzzer target: the model-config reader (moejit::parse_model_config). An accepted config slices into
// a valid local layer, and every kernel the planner picks for it at a few token counts is one the
// generator builds (so `moejit plan` never shows a key `moejit prewarm` rejects).
#include <cstdint>
#include <cstdlib>
#include <string>

#include "moejit/error.hpp"
#include "moejit/generator.hpp"
#include "moejit/model_config.hpp"
#include "moejit/planner.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string text(reinterpret_cast<const char*>(data), size);
  moejit::LayerSpec local;
  try {
    local = moejit::parse_model_config(text, "fuzz").local();
  } catch (const moejit::Error&) {
    return 0;
  }
  local.validate();  // throws (and so aborts, uncaught) if parsing let an invalid layer through
  for (int tokens : {1, 9, 300}) {
    const moejit::Plan plan = moejit::make_plan(local, moejit::Arch::sm_90a, tokens, 132);
    for (const moejit::KernelKey& k : plan.kernels) (void)moejit::generate_source(k);
  }
  return 0;
}
