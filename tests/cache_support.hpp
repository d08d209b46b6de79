#pragma once
// Helpers of the cache tests (test_cache.cpp, test_reliability_cache.cpp): a private cache root per test,
// stderr capture, a hand-written kernel per key (fast NVRTC compiles) and small file utilities.
#include "catch_compat.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "moejit/generator.hpp"
#include "moejit/kernel_cache.hpp"
#include "moejit/key.hpp"

namespace moejit::test {

// A fresh cache root, removed (permissions restored first) at the end of the test.
struct TempRoot {
  std::string path;
  TempRoot() {
    char tmpl[] = "/tmp/moejit-cache-test-XXXXXX";
    REQUIRE(::mkdtemp(tmpl) != nullptr);
    path = tmpl;
    path += "/cache";  // not created yet: the cache creates it (0700)
  }
  ~TempRoot() {
    const std::filesystem::path base = std::filesystem::path(path).parent_path();
    std::error_code ec;
    for (auto it = std::filesystem::recursive_directory_iterator(base, std::filesystem::directory_options::skip_permission_denied, ec);
         it != std::filesystem::recursive_directory_iterator(); it.increment(ec)) {
      if (it->is_directory(ec) && !it->is_symlink(ec)) ::chmod(it->path().c_str(), 0700);
    }
    ::chmod(base.c_str(), 0700);
    ::chmod(path.c_str(), 0700);
    std::filesystem::remove_all(base, ec);
  }
};

// Captures what the code under test writes to stderr.
struct StderrCapture {
  int saved = -1;
  std::string file;
  StderrCapture() {
    char tmpl[] = "/tmp/moejit-stderr-XXXXXX";
    int fd = ::mkstemp(tmpl);
    REQUIRE(fd >= 0);
    file = tmpl;
    std::fflush(stderr);
    saved = ::dup(2);
    ::dup2(fd, 2);
    ::close(fd);
  }
  std::string finish() {
    if (saved >= 0) {
      std::fflush(stderr);
      ::dup2(saved, 2);
      ::close(saved);
      saved = -1;
    }
    std::ifstream in(file);
    std::stringstream ss;
    ss << in.rdbuf();
    ::unlink(file.c_str());
    return ss.str();
  }
  ~StderrCapture() { finish(); }
};

inline int count(const std::string& haystack, const std::string& needle) {
  int n = 0;
  for (auto p = haystack.find(needle); p != std::string::npos; p = haystack.find(needle, p + 1)) ++n;
  return n;
}

inline KernelKey test_key(Arch arch = Arch::sm_90a, int hidden = 256) {
  KernelKey k;
  k.kind = KernelKind::decode_fc1;
  k.arch = arch;
  k.format = ScaleFormat::mxfp4;
  k.activation = Activation::silu;
  k.experts = 8;
  k.hidden = hidden;
  k.intermediate = 256;
  return k.normalized();
}

// Hand-written kernel per key (the key string is in the source, so keys never share a hash).
inline GeneratedSource hand_source(const KernelKey& k) {
  GeneratedSource s;
  s.entry = k.entry_name();
  s.name = s.entry + ".cu";
  s.source = "// key: " + k.str() + "\nextern \"C\" __global__ void " + s.entry +
             "(float* p, float scale) {\n"
             "  __shared__ float t[64];\n"
             "  t[threadIdx.x] = p[threadIdx.x] * scale;\n"
             "  __syncthreads();\n"
             "  p[threadIdx.x] = t[63 - threadIdx.x];\n"
             "}\n";
  return s;
}

inline CacheOptions opts(const TempRoot& root, bool quiet = true) {
  CacheOptions o;
  o.root = root.path;
  o.quiet = quiet;
  o.source = hand_source;
  return o;
}

inline bool is_elf(const std::vector<char>& b) { return b.size() > 4 && std::memcmp(b.data(), "\x7f" "ELF", 4) == 0; }

inline std::string entry_dir(const KernelCache& c, const KernelKey& k) {
  return c.schema_dir() + "/" + std::string(to_string(k.arch)) + "/" + c.hash_of(k);
}

// Compiles k into a fresh cache at root (as a prewarm would) and returns its entry's directory.
inline std::string published_entry(const TempRoot& root, const KernelKey& k) {
  KernelCache c(opts(root));
  c.get(k);
  return entry_dir(c, k);
}

// Names in dir, which must exist: "no names" from a directory that is not there would make every
// "nothing left behind" check pass whatever the cache did.
inline std::vector<std::string> names_in(const std::string& dir) {
  INFO("directory " << dir);
  REQUIRE(std::filesystem::is_directory(dir));
  std::vector<std::string> v;
  for (auto& e : std::filesystem::directory_iterator(dir)) v.push_back(e.path().filename().string());
  std::sort(v.begin(), v.end());
  return v;
}

inline unsigned mode_of(const std::string& p) {
  struct stat st;
  REQUIRE(::stat(p.c_str(), &st) == 0);
  return st.st_mode & 07777;
}

inline std::string read_text(const std::string& p) {
  std::ifstream in(p, std::ios::binary);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

inline void write_text(const std::string& p, const std::string& s) {
  std::ofstream out(p, std::ios::binary | std::ios::trunc);
  out << s;
}


}  // namespace moejit::test
