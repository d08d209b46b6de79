// libFuzzer target: the layer-file loader (moejit::read_layer_file, the reader `moejit run` and
// `moejit validate` use) on a real file. Accepted layers must validate; everything else throws
// moejit::Error.
#include <cstdint>
#include <cstdlib>

#include "fuzz/fuzz_support.hpp"
#include "moejit/error.hpp"
#include "moejit/safetensors.hpp"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static moejit_fuzz::MemFile file;
  const std::string path = file.hold(data, size);
  try {
    const moejit::HostLayer layer = moejit::read_layer_file(path);
    layer.validate();  // what the loader returns is a layer prepare accepts
  } catch (const moejit::Error&) {
  }
  return 0;
}
