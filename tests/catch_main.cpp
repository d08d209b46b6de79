// Main of the CPU test executables, the same for Catch2 v2 and v3 (catch_compat.hpp): v2 compiles its
// implementation into the translation unit that defines CATCH_CONFIG_RUNNER, v3 links it as a library.
#define CATCH_CONFIG_RUNNER
#include "catch_compat.hpp"

int main(int argc, char** argv) { return Catch::Session().run(argc, argv); }
