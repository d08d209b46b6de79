// NVRTC front end (DESIGN §5): generated source + embedded template headers -> cubin (or PTX) for the
// key's exact architecture.
//
// Option choices, all hashed into cache entries through compile_options():
//  - "--gpu-architecture=sm_XXa": a real architecture yields a cubin (SASS) that the driver loads without
//    a second JIT; the "a" variants unlock wgmma/TMA (sm_90a) and their sm_100a/sm_120a equivalents.
//    PTX mode uses the matching virtual architecture (compute_XXa).
//  - "-std=c++17": what the templates are written against, pinned so a future NVRTC default cannot
//    silently change the language.
//  - "-default-device": template helpers need no __device__ noise.
//  - "--ptxas-options=-v": resource lines (registers, smem, spills) land in the log for the manifest.
//  - "-lineinfo": source correlation in profilers at no runtime cost.
//  - No --use_fast_math (approximate division/exp would break the numerics of DESIGN §1), no -G.
#include <nvrtc.h>

#include <chrono>
#include <mutex>

#include <fmt/format.h>

#include "moejit/compiler.hpp"
#include "moejit/error.hpp"

namespace moejit {
namespace {

// NVRTC compiles are serialized within a process: it keeps global state, and parallel prewarm uses
// worker processes instead of threads.
std::mutex& nvrtc_mutex() {
  static std::mutex m;
  return m;
}

void check(nvrtcResult r, const char* what) {
  if (r != NVRTC_SUCCESS) throw Error(fmt::format("NVRTC: {} failed: {}", what, nvrtcGetErrorString(r)));
}

struct Program {
  nvrtcProgram prog = nullptr;
  ~Program() {
    if (prog) nvrtcDestroyProgram(&prog);
  }
};

std::string program_log(nvrtcProgram prog) {
  std::size_t size = 0;
  if (nvrtcGetProgramLogSize(prog, &size) != NVRTC_SUCCESS || size == 0) return {};
  std::string log(size, '\0');
  if (nvrtcGetProgramLog(prog, log.data()) != NVRTC_SUCCESS) return {};
  while (!log.empty() && log.back() == '\0') log.pop_back();
  return log;
}

std::string program_ptx(nvrtcProgram prog) {
  std::size_t size = 0;
  check(nvrtcGetPTXSize(prog, &size), "nvrtcGetPTXSize");
  std::string ptx(size, '\0');
  check(nvrtcGetPTX(prog, ptx.data()), "nvrtcGetPTX");
  while (!ptx.empty() && ptx.back() == '\0') ptx.pop_back();  // text, not a C string
  return ptx;
}

// Value of the PTX header comment line starting with prefix ("// Compiler Build ID: CL-..."), or "".
std::string ptx_header_line(const std::string& ptx, std::string_view prefix) {
  auto pos = ptx.find(prefix);
  if (pos == std::string::npos) return {};
  auto end = ptx.find('\n', pos);
  std::string v = ptx.substr(pos + prefix.size(), end == std::string::npos ? end : end - pos - prefix.size());
  while (!v.empty() && (v.back() == '\r' || v.back() == ' ')) v.pop_back();
  return v;
}

// True when the PTX defines a kernel named entry or entry_<suffix>.
bool defines_entry(const std::string& ptx, const std::string& entry) {
  const std::string needle = ".entry " + entry;
  for (auto pos = ptx.find(needle); pos != std::string::npos; pos = ptx.find(needle, pos + 1)) {
    const char next = pos + needle.size() < ptx.size() ? ptx[pos + needle.size()] : '\0';
    if (next == '(' || next == '_') return true;
  }
  return false;
}

std::string compute_build_id() {
  std::lock_guard lock(nvrtc_mutex());
  int n = 0;
  if (nvrtcGetNumSupportedArchs(&n) != NVRTC_SUCCESS || n <= 0) return {};
  std::vector<int> archs(std::size_t(n), 0);
  if (nvrtcGetSupportedArchs(archs.data()) != NVRTC_SUCCESS) return {};
  std::string arch = fmt::format("--gpu-architecture=compute_{}", archs.back());
  Program p;
  if (nvrtcCreateProgram(&p.prog, "", "moejit_version_probe.cu", 0, nullptr, nullptr) != NVRTC_SUCCESS) return {};
  const char* opts[] = {arch.c_str()};
  if (nvrtcCompileProgram(p.prog, 1, opts) != NVRTC_SUCCESS) return {};
  std::string ptx;
  try {
    ptx = program_ptx(p.prog);
  } catch (const Error&) {
    return {};
  }
  std::string tools = ptx_header_line(ptx, "// Cuda compilation tools, ");
  std::string build = ptx_header_line(ptx, "// Compiler Build ID: ");
  if (tools.empty() && build.empty()) return {};
  return fmt::format("{}; {}", tools, build);
}

}  // namespace

std::string nvrtc_version() {
  int major = 0, minor = 0;
  check(nvrtcVersion(&major, &minor), "nvrtcVersion");
  return fmt::format("{}.{}", major, minor);
}

std::string nvrtc_build_id() {
  static const std::string id = [] {
    std::string s = compute_build_id();
    return s.empty() ? nvrtc_version() : s;
  }();
  return id;
}

std::vector<std::string> compile_options(Arch arch, bool want_ptx) {
  const int cc = arch_cc(arch);
  std::vector<std::string> opts = {
      fmt::format("--gpu-architecture={}_{}a", want_ptx ? "compute" : "sm", cc),
      "-std=c++17",
      "-default-device",
      "-lineinfo",
  };
  if (!want_ptx) opts.emplace_back("--ptxas-options=-v");
  return opts;
}

CompileOutput compile_source(const GeneratedSource& src, Arch arch, bool want_ptx) {
  CompileOutput out;
  out.options = compile_options(arch, want_ptx);
  const auto headers = template_headers();
  std::vector<const char*> header_text, header_names;
  for (const auto& [name, content] : headers) {
    header_names.push_back(name.c_str());
    header_text.push_back(content.c_str());
  }
  std::vector<const char*> opts;
  for (const auto& o : out.options) opts.push_back(o.c_str());
  const std::string name = src.name.empty() ? src.entry + ".cu" : src.name;

  std::lock_guard lock(nvrtc_mutex());
  const auto t0 = std::chrono::steady_clock::now();
  Program p;
  check(nvrtcCreateProgram(&p.prog, src.source.c_str(), name.c_str(), int(headers.size()), header_text.data(),
                           header_names.data()),
        "nvrtcCreateProgram");
  const nvrtcResult r = nvrtcCompileProgram(p.prog, int(opts.size()), opts.data());
  out.log = program_log(p.prog);
  if (r != NVRTC_SUCCESS) {
    throw Error(fmt::format("NVRTC failed to compile {} (kernel {}) for {}: {}\n{}", name, src.entry,
                            to_string(arch), nvrtcGetErrorString(r), out.log));
  }
  // A source that compiles but lacks its extern "C" entry would only fail at cuModuleGetFunction on a
  // GPU; catch it here, where CPU-only CI compiles every key. src.entry is the kernel's name, or the
  // common prefix of the kernels of a multi-kernel module ("<entry>_weights", "<entry>_scales").
  const std::string ptx = program_ptx(p.prog);
  if (!src.entry.empty() && !defines_entry(ptx, src.entry)) {
    throw Error(fmt::format("NVRTC compiled {} for {}, but it defines no extern \"C\" __global__ kernel named {} "
                            "(or {}_*)",
                            name, to_string(arch), src.entry, src.entry));
  }
  if (want_ptx) {
    out.binary.assign(ptx.begin(), ptx.end());
  } else {
    std::size_t size = 0;
    check(nvrtcGetCUBINSize(p.prog, &size), "nvrtcGetCUBINSize");
    if (size == 0) throw Error(fmt::format("NVRTC produced an empty cubin for {} ({})", name, to_string(arch)));
    out.binary.resize(size);
    check(nvrtcGetCUBIN(p.prog, out.binary.data()), "nvrtcGetCUBIN");
  }
  out.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  if (!want_ptx) {
    const PtxasResources res = parse_ptxas_resources(out.log, src.entry);
    out.registers = res.registers;
    out.shared_bytes = res.shared_bytes;
    out.spill_bytes = res.spill_bytes;
    out.wgmma_serialized = res.wgmma_serialized;
  }
  return out;
}

}  // namespace moejit
