#pragma once
// Runs the `moejit` binary as a separate process and collects what it prints (CLI tests, CPU and GPU).
#include "catch_compat.hpp"

#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <set>
#include <stdexcept>
#include <string>
#include <system_error>
#include <vector>

#include "moejit/planner.hpp"

namespace moejit_test {

// A private cache (and scratch) directory for a whole test binary, removed at exit: the CLI processes the
// test starts inherit MOEJIT_CACHE_DIR pointing into it, and never MOEJIT_NO_JIT.
struct Sandbox {
  std::string dir;
  Sandbox() {
    const char* tmp = std::getenv("TMPDIR");
    std::string t = std::string(tmp && *tmp ? tmp : "/tmp") + "/moejit-cli-test-XXXXXX";
    std::vector<char> buf(t.begin(), t.end());
    buf.push_back('\0');
    if (!mkdtemp(buf.data())) throw std::runtime_error("mkdtemp failed");
    dir = buf.data();
    ::setenv("MOEJIT_CACHE_DIR", (dir + "/cache").c_str(), 1);
    ::unsetenv("MOEJIT_NO_JIT");
  }
  ~Sandbox() {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }
};

struct CliResult {
  int rc = -1;
  std::string out;  // stdout and stderr together
};

inline std::string shell_quote(const std::string& s) {
  std::string q = "'";
  for (char c : s) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// The binary: $MOEJIT_CLI when set (a copy of the build moved elsewhere), else the build's own path.
inline std::string cli_binary() {
  const char* env = std::getenv("MOEJIT_CLI");
  return env && *env ? env : MOEJIT_CLI_PATH;
}

// A shell command line (already quoted), its stdout and stderr collected.
inline CliResult run_cli_command(const std::string& command) {
  const std::string cmd = command + " 2>&1";
  CliResult r;
  FILE* p = ::popen(cmd.c_str(), "r");
  REQUIRE(p != nullptr);
  std::array<char, 4096> buf;
  size_t n;
  while ((n = std::fread(buf.data(), 1, buf.size(), p)) > 0) r.out.append(buf.data(), n);
  const int status = ::pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : 128;
  return r;
}

inline CliResult run_cli(const std::vector<std::string>& args) {
  const std::string bin = cli_binary();
  REQUIRE(::access(bin.c_str(), X_OK) == 0);  // build the moejit_cli target before this test
  std::string cmd = shell_quote(bin);
  for (const auto& a : args) cmd += " " + shell_quote(a);
  return run_cli_command(cmd);
}

// Compiles kernel keys into the cache ($MOEJIT_CACHE_DIR) 16 CLI processes at a time (`moejit inspect KEY
// --emit resources`): NVRTC serializes compiles within a process, so a test over many tile variants
// compiles its kernels first this way and then finds them cached. Fails the test on any compile error.
inline void compile_keys(const std::set<std::string>& keys) {
  if (keys.empty()) return;
  std::string list;
  for (const std::string& k : keys) list += k + "\n";
  // The reports go nowhere, the errors into the result.
  const std::string cmd = "{ printf %s " + shell_quote(list) + " | xargs -P 16 -I KEY " + shell_quote(cli_binary()) +
                          " inspect KEY --emit resources 2>&1 >/dev/null; }";
  const CliResult r = run_cli_command(cmd);
  INFO(r.out);
  REQUIRE(r.rc == 0);
}

// compile_keys for every kernel of the plans (a case runs their forwards after it, finding them cached).
inline void compile_plans(const std::vector<moejit::Plan>& plans) {
  std::set<std::string> keys;
  for (const moejit::Plan& p : plans)
    for (const moejit::KernelKey& k : p.kernels) keys.insert(k.str());
  compile_keys(keys);
}

}  // namespace moejit_test
