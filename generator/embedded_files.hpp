#pragma once
// Files compiled into the library by generator/embed_files.cmake: the device headers of templates/
// and the bundled model configs of configs/.
#include <string_view>
#include <vector>

namespace moejit::detail {
struct EmbeddedFile {
  std::string_view name;     // file name, e.g. "decode_fc1.cuh"
  std::string_view content;  // the file's text
};
const std::vector<EmbeddedFile>& embedded_templates();  // templates/*.cuh
const std::vector<EmbeddedFile>& embedded_configs();    // configs/*.json
}  // namespace moejit::detail
