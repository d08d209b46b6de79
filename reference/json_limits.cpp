// Nesting bound for JSON read from files (see json_limits.hpp).
#include "reference/json_limits.hpp"

namespace moejit::detail {

std::string json_depth_problem(std::string_view text, int max_depth) {
  int depth = 0;
  bool in_string = false;
  for (size_t i = 0; i < text.size(); ++i) {
    const char c = text[i];
    if (in_string) {
      if (c == '\\')
        ++i;  // the escaped character cannot end the string
      else if (c == '"')
        in_string = false;
      continue;
    }
    if (c == '"') {
      in_string = true;
    } else if (c == '[' || c == '{') {
      if (++depth > max_depth)
        return "nests arrays and objects deeper than " + std::to_string(max_depth) + " levels";
    } else if ((c == ']' || c == '}') && depth > 0) {
      --depth;
    }
  }
  return {};
}

}  // namespace moejit::detail
