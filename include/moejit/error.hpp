#pragma once
// Every failure moejit reports is a moejit::Error whose message names the argument and the rule it broke.
#include <stdexcept>
#include <string>

namespace moejit {
class Error : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};
}  // namespace moejit
