// `moejit inspect KEY`: the generated source, PTX, SASS or resource usage of one kernel.
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "moejit/compiler.hpp"
#include "moejit/error.hpp"
#include "moejit/generator.hpp"
#include "moejit/kernel_cache.hpp"
#include "moejit/sass_report.hpp"
#include "tools/cli_common.hpp"

namespace moejit::cli {

namespace {

bool executable(const std::string& p) {
  struct stat st {};
  return ::stat(p.c_str(), &st) == 0 && S_ISREG(st.st_mode) && ::access(p.c_str(), X_OK) == 0;
}

// First of `names` found in PATH, then in $MOEJIT_CUDA_ROOT/bin, $CUDA_HOME/bin, $CUDA_PATH/bin and
// /usr/local/cuda/bin.
std::string find_tool(const std::vector<std::string>& names, std::vector<std::string>* searched) {
  std::vector<std::string> dirs;
  if (const char* path = std::getenv("PATH")) {
    std::stringstream ss(path);
    std::string d;
    while (std::getline(ss, d, ':'))
      if (!d.empty()) dirs.push_back(d);
  }
  for (const char* env : {"MOEJIT_CUDA_ROOT", "CUDA_HOME", "CUDA_PATH"})
    if (const char* v = std::getenv(env); v && *v) dirs.push_back(std::string(v) + "/bin");
  dirs.push_back("/usr/local/cuda/bin");
  for (const auto& n : names)
    for (const auto& d : dirs) {
      const std::string p = d + "/" + n;
      if (executable(p)) return p;
    }
  if (searched) *searched = dirs;
  return {};
}

// Runs argv[0] with argv; its standard output goes to out_fd when that is >= 0 (else to ours).
int run_tool(const std::vector<std::string>& argv, int out_fd = -1) {
  std::fflush(stdout);
  std::fflush(stderr);
  pid_t pid = ::fork();
  if (pid < 0) throw Error(fmt::format("fork failed: {}", std::strerror(errno)));
  if (pid == 0) {
    if (out_fd >= 0 && ::dup2(out_fd, STDOUT_FILENO) < 0) ::_exit(127);
    std::vector<char*> a;
    for (const auto& s : argv) a.push_back(const_cast<char*>(s.c_str()));
    a.push_back(nullptr);
    ::execv(a[0], a.data());
    std::fprintf(stderr, "moejit inspect: cannot execute %s: %s\n", a[0], std::strerror(errno));
    ::_exit(127);
  }
  int status = 0;
  while (::waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// A temporary file under $TMPDIR (or /tmp) named moejit-inspect-XXXXXX<suffix>, created and open: its
// path and descriptor.
std::pair<std::string, int> temporary_file(const char* suffix) {
  const char* tmpdir = std::getenv("TMPDIR");
  const std::string path = fmt::format("{}/moejit-inspect-XXXXXX{}", tmpdir && *tmpdir ? tmpdir : "/tmp", suffix);
  std::vector<char> tmpl(path.begin(), path.end());
  tmpl.push_back('\0');
  const int fd = ::mkstemps(tmpl.data(), static_cast<int>(std::strlen(suffix)));
  if (fd < 0) throw Error(fmt::format("cannot create a temporary file {}: {}", path, std::strerror(errno)));
  return {std::string(tmpl.data()), fd};
}

// Disassembles k's cubin with cuobjdump or nvdisasm. report_loops: print sass_loop_report of the listing
// instead of the listing itself.
int emit_sass(const CachedKernel& k, bool report_loops) {
  const std::string tool = find_tool({"cuobjdump", "nvdisasm"}, nullptr);
  if (tool.empty())
    throw Error(
        "--emit sass and --emit loops need cuobjdump or nvdisasm from the CUDA toolkit, and neither was found in PATH, "
        "$MOEJIT_CUDA_ROOT/bin, $CUDA_HOME/bin, $CUDA_PATH/bin or /usr/local/cuda/bin (install them or set "
        "MOEJIT_CUDA_ROOT); "
        "--emit ptx and --emit resources work without them");
  auto [path, fd] = temporary_file(".cubin");
  size_t off = 0;
  while (off < k.cubin.size()) {
    ssize_t n = ::write(fd, k.cubin.data() + off, k.cubin.size() - off);
    if (n <= 0) {
      ::close(fd);
      ::unlink(path.c_str());
      throw Error(fmt::format("cannot write {}: {}", path, std::strerror(errno)));
    }
    off += static_cast<size_t>(n);
  }
  ::close(fd);
  const bool is_cuobjdump = tool.size() >= 9 && tool.compare(tool.size() - 9, 9, "cuobjdump") == 0;
  std::vector<std::string> cmd = is_cuobjdump ? std::vector<std::string>{tool, "--dump-sass", path}
                                              : std::vector<std::string>{tool, "--print-code", path};
  if (!report_loops) {
    const int rc = run_tool(cmd);
    ::unlink(path.c_str());
    if (rc != 0) throw Error(fmt::format("{} exited with status {}", tool, rc));
    return kExitOk;
  }
  std::string listing_path;
  int listing_fd = -1;
  try {
    std::tie(listing_path, listing_fd) = temporary_file(".sass");
  } catch (...) {
    ::unlink(path.c_str());
    throw;
  }
  const int rc = run_tool(cmd, listing_fd);
  ::close(listing_fd);
  ::unlink(path.c_str());
  std::ifstream in(listing_path);
  std::stringstream listing;
  listing << in.rdbuf();
  ::unlink(listing_path.c_str());
  if (rc != 0) throw Error(fmt::format("{} exited with status {}", tool, rc));
  fmt::print("{}", sass_loop_report(listing.str()));
  return kExitOk;
}

void emit_resources(const CachedKernel& k) {
  const auto& m = k.manifest;
  auto get_int = [&](const char* group, const char* field) -> std::string {
    if (!m.contains(group) || !m[group].contains(field) || !m[group][field].is_number_integer()) return "unknown";
    const auto v = m[group][field].get<long long>();
    return v < 0 ? std::string("unknown") : std::to_string(v);
  };
  fmt::print("key          {}\n", k.key.str());
  fmt::print("entry        {}\n", k.entry);
  fmt::print("hash         {}\n", k.hash);
  fmt::print("registers    {}\n", get_int("resources", "registers"));
  fmt::print("shared       {} bytes (static)\n", get_int("resources", "shared_bytes"));
  fmt::print("spills       {} bytes (stores + loads)\n", get_int("resources", "spill_bytes"));
  if (m.contains("resources") && m["resources"].contains("wgmma_serialized") && m["resources"]["wgmma_serialized"].is_boolean() &&
      m["resources"]["wgmma_serialized"].get<bool>())
    fmt::print("wgmma        serialized by ptxas (each waits for its own completion; see the ptxas lines)\n");
  fmt::print("cubin        {} bytes\n", k.cubin.size());
  if (m.contains("compile_seconds") && m["compile_seconds"].is_number())
    fmt::print("compile      {:.2f} s{}\n", m["compile_seconds"].get<double>(), k.from_disk ? " (read from the cache)" : "");
  if (m.contains("nvrtc_build") && m["nvrtc_build"].is_string()) fmt::print("nvrtc        {}\n", m["nvrtc_build"].get<std::string>());
  // Per-function ptxas lines (a key may hold several entry points, e.g. the repack kernels).
  if (m.contains("compile_log") && m["compile_log"].is_string()) {
    std::stringstream ss(m["compile_log"].get<std::string>());
    std::string line;
    bool header = false;
    while (std::getline(ss, line)) {
      if (line.find("ptxas info") == std::string::npos && line.find("bytes stack frame") == std::string::npos) continue;
      if (!header) fmt::print("ptxas:\n");
      header = true;
      fmt::print("  {}\n", line);
    }
  }
}

}  // namespace

int cmd_inspect(int argc, char** argv) {
  static const std::string example = [] {
    try {
      return make_plan(load_model_config(default_config_name()).local(), Arch::sm_90a, 1, 132).kernels.back().str();
    } catch (const std::exception&) {
      return std::string("decode_fc2:sm_90a:...");
    }
  }();
  static const CommandSpec spec{
      "inspect",
      "KEY [--emit source|ptx|sass|loops|resources] [--arch ARCH]",
      "show one kernel",
      "Emits the generated CUDA source of a kernel key, the PTX NVRTC makes of it, its SASS (through cuobjdump or\n"
      "nvdisasm from the CUDA toolkit, when installed), a report of the SASS's loops (per loop: address range,\n"
      "instruction count, opcode counts, spill loads/stores, and the positions of its loads, stores and MMAs)\n"
      "or its resource usage (registers, static shared memory, spills, cubin size; compiled into the cache when\n"
      "missing). `moejit plan` lists a config's keys, e.g.\n  " +
          example,
      {{"emit", "WHAT", "source (default), ptx, sass, loops or resources"},
       {"arch", "ARCH", "override the key's architecture (sm_90a, sm_100a, sm_120a, sm_121a)"}},
      {"KEY"}};
  Args args(spec, argc, argv, 2);
  if (args.help()) {
    std::fputs(help_text(spec).c_str(), stdout);
    return kExitOk;
  }
  KernelKey key;
  try {
    key = KernelKey::parse(args.positionals()[0]);
  } catch (const Error& e) {
    throw UsageError(fmt::format("KEY: {}", e.what()));
  }
  if (args.has("arch")) key.arch = arch_from_args(args);
  try {
    key = key.normalized();
  } catch (const Error& e) {
    throw UsageError(fmt::format("KEY: {}", e.what()));
  }
  const std::string what = args.str("emit", "source");
  if (what == "source") {
    fmt::print("{}", generate_source(key).source);
    return kExitOk;
  }
  if (what == "ptx") {
    const CompileOutput out = compile_source(generate_source(key), key.arch, /*want_ptx=*/true);
    size_t n = out.binary.size();
    while (n > 0 && out.binary[n - 1] == '\0') --n;  // NVRTC's PTX buffer ends with a NUL
    std::fwrite(out.binary.data(), 1, n, stdout);
    return kExitOk;
  }
  if (what == "sass" || what == "loops" || what == "resources") {
    KernelCache cache;
    auto k = cache.get(key);
    if (what != "resources") return emit_sass(*k, what == "loops");
    emit_resources(*k);
    return kExitOk;
  }
  throw UsageError(fmt::format("--emit must be source, ptx, sass, loops or resources, got '{}'", what));
}

}  // namespace moejit::cli
