#pragma once
// The one place the tests name Catch2's headers, so they build against Catch2 v2 (Debian 12's
// `catch2`, one header) and v3 (Ubuntu 24.04, Debian 13: a compiled library with split headers).
// tests/CMakeLists.txt sets MOEJIT_CATCH2_MAJOR from the Catch2 it finds.
//
// The tests use the v2 spellings: `Approx`, `Catch::Contains` / `Catch::Matchers::Contains` on strings,
// and a main of their own (catch_main.cpp, gpu_main.cpp) through Catch::Session. In v3 `Approx` moved
// into namespace Catch and the substring matcher is `ContainsSubstring` (v3's `Matchers::Contains` is
// the range matcher), so this header maps the v2 names onto v3's.
#if defined(MOEJIT_CATCH2_MAJOR) && MOEJIT_CATCH2_MAJOR >= 3
#include <catch2/catch_approx.hpp>
#include <catch2/catch_session.hpp>
#include <catch2/catch_test_macros.hpp>
#include <catch2/matchers/catch_matchers_string.hpp>

#include <string>

namespace Catch {
inline Matchers::StringContainsMatcher Contains(const std::string& str, CaseSensitive cs = CaseSensitive::Yes) {
  return Matchers::ContainsSubstring(str, cs);
}
}  // namespace Catch
using Catch::Approx;
#else
#include <catch2/catch.hpp>
#endif
