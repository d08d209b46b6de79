#pragma once
// ScopedEnv: environment variables a test changes (planner overrides, MOEJIT_NO_JIT, cache roots),
// restored when the scope ends, so a failed REQUIRE (or an unexpected exception) between a setenv and
// its undo cannot leak the value into later test cases. Shared by the CPU and GPU tests.
#include <stdlib.h>

#include <algorithm>
#include <initializer_list>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace moejit::test {

class ScopedEnv {
 public:
  // Saves the current value (or absence) of each named variable; the destructor puts it back (or
  // unsets it). Nothing is changed here: use set()/unset(), or setenv on one of the names.
  explicit ScopedEnv(std::initializer_list<const char*> names) {
    for (const char* n : names) {
      const char* v = ::getenv(n);
      saved_.emplace_back(n, v ? std::optional<std::string>(v) : std::nullopt);
    }
  }
  ~ScopedEnv() {
    // Reverse order, so a name listed twice ends with the value it had before the first save.
    for (auto it = saved_.rbegin(); it != saved_.rend(); ++it) {
      if (it->second) ::setenv(it->first.c_str(), it->second->c_str(), 1);
      else ::unsetenv(it->first.c_str());
    }
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

  // Sets a guarded variable; a null value unsets it. Throws std::logic_error for a name the guard
  // does not restore (that change would outlive the scope).
  void set(const char* name, const char* value) {
    check_guarded(name);
    if (value) ::setenv(name, value, 1);
    else ::unsetenv(name);
  }
  void set(const char* name, const std::string& value) { set(name, value.c_str()); }
  void unset(const char* name) { set(name, nullptr); }

 private:
  void check_guarded(const char* name) const {
    const bool guarded = std::any_of(saved_.begin(), saved_.end(), [&](const auto& s) { return s.first == name; });
    if (!guarded) throw std::logic_error(std::string("ScopedEnv: ") + name + " is not restored by this guard");
  }

  std::vector<std::pair<std::string, std::optional<std::string>>> saved_;
};

}  // namespace moejit::test
