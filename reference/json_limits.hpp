#pragma once
// A bound on how deeply JSON read from files may nest, checked before the text is parsed.
//
// nlohmann::json parses iteratively, but copying, comparing, dumping and destroying a value recurse once
// per level, so a file of a few hundred kilobytes of "[[[[..." (a model config, a cache manifest, a
// safetensors header) would overflow the stack in whatever touched it next. No JSON moejit reads nests
// more than a few levels, so anything deeper than kMaxJsonDepth is refused up front, by a scan that
// recurses nowhere itself.
#include <string>
#include <string_view>

namespace moejit::detail {

inline constexpr int kMaxJsonDepth = 64;

// "" when no array or object in text nests deeper than max_depth levels, else a sentence saying so
// ("nests arrays and objects deeper than 64 levels"). Strings (with their escapes) are skipped; text that
// is not JSON at all passes, for the parser to reject with its own message. Linear, no allocation.
std::string json_depth_problem(std::string_view text, int max_depth = kMaxJsonDepth);

}  // namespace moejit::detail
