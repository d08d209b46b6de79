#pragma once
// Every failure moejit reports is a moejit::Error whose message names the argument (a tensor, a file
// and field, an option, a kernel key) and the rule it broke. Functions that throw say so in their
// header; besides moejit::Error, only std::bad_alloc (out of host memory) escapes the library.
// Thread-safe to construct, copy and read like std::runtime_error.
#include <stdexcept>
#include <string>

namespace moejit {
// what(): the full message, e.g. "layer tensor w2_scale has 12 elements, expected 16 (shape [E, H, I/16])".
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
}  // namespace moejit
