// Where the cubin cache lives (DESIGN §5): an explicit root, else $MOEJIT_CACHE_DIR, else
// $XDG_CACHE_HOME/moejit, else ~/.cache/moejit. The result is absolute, so a process that changes its
// working directory keeps using the same cache.
#include <pwd.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <vector>

#include "moejit/kernel_cache.hpp"

namespace moejit {
namespace {

std::string env(const char* name) {
  const char* v = std::getenv(name);
  return v ? std::string(v) : std::string();
}

std::string home_dir() {
  if (auto h = env("HOME"); !h.empty()) return h;
  // Services started without HOME still have a passwd entry.
  struct passwd pw, *result = nullptr;
  std::vector<char> buf(16384);
  if (::getpwuid_r(::geteuid(), &pw, buf.data(), buf.size(), &result) == 0 && result && result->pw_dir)
    return result->pw_dir;
  return {};
}

}  // namespace

std::string KernelCache::resolve_root(const std::string& configured) {
  std::string root = configured;
  if (root.empty()) root = env("MOEJIT_CACHE_DIR");
  // The XDG spec says a relative $XDG_CACHE_HOME is invalid and must be ignored.
  if (root.empty()) {
    if (auto xdg = env("XDG_CACHE_HOME"); !xdg.empty() && xdg[0] == '/') root = xdg + "/moejit";
  }
  if (root.empty()) {
    auto home = home_dir();
    if (home.empty()) return {};  // no usable location: the cache degrades to memory with a warning
    root = home + "/.cache/moejit";
  }
  // Unexpanded "~/" (e.g. from a service unit's environment) means the home directory.
  if (root == "~" || root.rfind("~/", 0) == 0) root = home_dir() + root.substr(1);
  if (root[0] != '/') {
    std::error_code ec;
    auto abs = std::filesystem::absolute(root, ec);
    if (!ec) root = abs.string();
  }
  while (root.size() > 1 && root.back() == '/') root.pop_back();
  return root;
}

}  // namespace moejit
