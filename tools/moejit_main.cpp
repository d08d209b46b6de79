// `moejit`: prewarm the kernel cache, inspect generated kernels, look after the cache, show plans,
// run and benchmark layers, and a demo of the whole pipeline (DESIGN §7).
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <string>

#include "moejit/compiler.hpp"
#include "moejit/error.hpp"
#include "moejit/kernel_cache.hpp"
#include "moejit/model_config.hpp"
#include "moejit/runtime.hpp"
#include "tools/cli_common.hpp"

namespace {

using namespace moejit::cli;

struct Command {
  const char* name;
  const char* summary;
  int (*fn)(int, char**);
};

int cmd_version(int argc, char** argv);

const Command kCommands[] = {
    {"prewarm", "compile and cache every kernel a model config needs (no GPU needed with --arch)", cmd_prewarm},
    {"inspect", "emit generated source, PTX, SASS or resource usage of one kernel key", cmd_inspect},
    {"cache", "look after the on-disk kernel cache: ls | verify | gc | clear | path", cmd_cache},
    {"plan", "show which kernel family and kernels the planner picks for each token count", cmd_plan},
    {"run", "run one layer from safetensors files; --check compares with the CPU reference", cmd_run},
    {"compress", "turn a layer file's scale planes into the compressed scale format (docs/CSF.md)", cmd_compress},
    {"validate", "check layer and input files with run's rules (no GPU needed)", cmd_validate},
    {"bench", "time layers inside CUDA graphs with cold L2 next to the measured copy bandwidth", cmd_bench},
    {"demo", "prewarm, run, check and time the default config (plans and prewarms without a GPU)", cmd_demo},
    {"version", "print versions (moejit, cache schema, NVRTC, driver)", cmd_version},
};

int cmd_version(int argc, char** argv) {
  static const CommandSpec spec{"version", "", "print versions",
                                "Prints the moejit version, the cache schema, NVRTC's version and the GPU state.", {}, {}};
  Args args(spec, argc, argv, 2);
  if (args.help()) {
    std::fputs(help_text(spec).c_str(), stdout);
    return kExitOk;
  }
  fmt::print("moejit 0.1.0\n");
  fmt::print("cache schema v{}\n", moejit::kCacheSchemaVersion);
  fmt::print("nvrtc {}\n", moejit::nvrtc_version());
  std::string why;
  if (moejit::gpu_available(&why)) {
    // Read without a context, so an unsupported GPU is described rather than refused.
    const moejit::DeviceInfo d = moejit::query_device(0);
    fmt::print("driver {}.{}\n", d.driver_version / 1000, d.driver_version % 1000 / 10);
    fmt::print("gpu {} (compute capability {}.{}, {} SMs, {})\n", d.name, d.cc_major, d.cc_minor, d.sm_count,
               d.arch ? fmt::format("runs {}", to_string(*d.arch)) : std::string("not a moejit target"));
  } else {
    fmt::print("driver none\ngpu none ({})\n", why);
  }
  fmt::print("default config {}; bundled: {}\n", moejit::default_config_name(),
             fmt::join(moejit::bundled_config_names(), ", "));
  return kExitOk;
}

void print_usage(std::FILE* to) {
  std::string s = "usage: moejit <command> [options]    (moejit <command> --help for details)\n\ncommands:\n";
  for (const auto& c : kCommands) s += fmt::format("  {:<8}  {}\n", c.name, c.summary);
  s += "\nenvironment: MOEJIT_CACHE_DIR (cache root), MOEJIT_NO_JIT=1 (a cache miss is an error)\n";
  std::fputs(s.c_str(), to);
}

// One line: the first line of a message (NVRTC logs follow on later lines and are kept).
std::string first_line(const std::string& s) { return s.substr(0, s.find('\n')); }

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) {
    print_usage(stderr);
    return kExitError;
  }
  const std::string name = argv[1];
  if (name == "--help" || name == "-h" || name == "help") {
    print_usage(stdout);
    return kExitOk;
  }
  if (name == "--version") return cmd_version(argc, argv);
  for (const auto& c : kCommands) {
    if (name != c.name) continue;
    try {
      return c.fn(argc, argv);
    } catch (const UsageError& e) {
      std::fprintf(stderr, "%s: error: %s (see 'moejit %s --help')\n", prog(name).c_str(), first_line(e.what()).c_str(),
                   name.c_str());
      return kExitError;
    } catch (const std::exception& e) {
      const std::string msg = e.what();
      std::fprintf(stderr, "%s: error: %s\n", prog(name).c_str(), first_line(msg).c_str());
      if (msg.find('\n') != std::string::npos) std::fprintf(stderr, "%s\n", msg.substr(msg.find('\n') + 1).c_str());
      return kExitError;
    }
  }
  std::fprintf(stderr, "moejit: error: unknown command '%s' (commands: prewarm, inspect, cache, plan, run, validate, compress, bench, demo, version)\n",
               name.c_str());
  return kExitError;
}
