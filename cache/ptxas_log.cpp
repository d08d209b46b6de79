// Reads register, shared-memory and spill figures out of the `ptxas -v` lines of an NVRTC log. They are
// recorded in cache manifests and shown by `moejit inspect`, so a tile change that starts spilling is
// visible without a GPU.
//
// ptxas reports per function:
//   ptxas info    : Compiling entry function 'k' for 'sm_90a'
//   ptxas info    : Function properties for k
//   ptxas         .     0 bytes stack frame, 8 bytes spill stores, 8 bytes spill loads
//   ptxas info    : Used 10 registers, used 1 barriers, 256 bytes smem
// (older releases: "Used 10 registers, 256 bytes smem, 352 bytes cmem[0]"), and for a warpgroup-MMA
// kernel whose wgmmas it had to serialize:
//   ptxas info    : (C7512) Potential Performance Loss: wgmma.mma_async instructions are serialized due
//                   to insufficient register resources for the wgmma pipeline in the function 'k'
// (one line; the reason varies). Serialized, each wgmma waits for its own completion, which cost the
// batch family 1-11 % (docs/perf-log.md v26), so the flag is kept with the other resources.
#include <algorithm>
#include <cctype>
#include <map>
#include <string>

#include "moejit/compiler.hpp"

namespace moejit {
namespace {

// The unsigned number written just before `token` in line, or -1.
int number_before(std::string_view line, std::string_view token) {
  auto pos = line.find(token);
  if (pos == std::string_view::npos) return -1;
  while (pos > 0 && line[pos - 1] == ' ') --pos;
  auto end = pos;
  while (pos > 0 && std::isdigit(static_cast<unsigned char>(line[pos - 1]))) --pos;
  if (pos == end) return -1;
  long v = 0;
  for (auto i = pos; i < end && v < (1L << 40); ++i) v = v * 10 + (line[i] - '0');
  return v > 0x7fffffff ? 0x7fffffff : int(v);
}

// Name between the first pair of single quotes after `after`, or the rest of the line.
std::string function_name(std::string_view line, std::string_view after) {
  auto rest = line.substr(line.find(after) + after.size());
  auto q = rest.find('\'');
  if (q != std::string_view::npos) {
    auto q2 = rest.find('\'', q + 1);
    return std::string(rest.substr(q + 1, q2 == std::string_view::npos ? q2 : q2 - q - 1));
  }
  while (!rest.empty() && (rest.back() == '\r' || rest.back() == ' ')) rest.remove_suffix(1);
  while (!rest.empty() && rest.front() == ' ') rest.remove_prefix(1);
  return std::string(rest);
}

}  // namespace

PtxasResources parse_ptxas_resources(std::string_view log, std::string_view entry) {
  std::map<std::string, PtxasResources> per_function;
  std::string current;        // function of the last "Function properties" line (spills belong to it)
  std::string current_entry;  // kernel being compiled ("Used N registers" belongs to it, even after
                              // the properties of non-inlined callees were printed)
  while (!log.empty()) {
    auto nl = log.find('\n');
    std::string_view line = log.substr(0, nl);
    log = nl == std::string_view::npos ? std::string_view{} : log.substr(nl + 1);
    if (line.find("ptxas") == std::string_view::npos) continue;
    if (line.find("wgmma.mma_async instructions are serialized") != std::string_view::npos) {
      const auto fn = line.rfind("function '");
      per_function[fn == std::string_view::npos ? current_entry : function_name(line.substr(fn), "function")]
          .wgmma_serialized = true;
    } else if (line.find("Compiling entry function") != std::string_view::npos) {
      current = current_entry = function_name(line, "Compiling entry function");
    } else if (line.find("Function properties for") != std::string_view::npos) {
      current = function_name(line, "Function properties for");
    } else if (line.find("spill stores") != std::string_view::npos) {
      int st = number_before(line, "bytes spill stores");
      int ld = number_before(line, "bytes spill loads");
      if (st >= 0 || ld >= 0) per_function[current].spill_bytes = std::max(st, 0) + std::max(ld, 0);
    } else if (line.find("Used") != std::string_view::npos && line.find("registers") != std::string_view::npos) {
      auto& r = per_function[current_entry.empty() ? current : current_entry];
      r.registers = number_before(line, "registers");
      int smem = number_before(line, "bytes smem");
      r.shared_bytes = smem >= 0 ? smem : 0;  // ptxas omits smem when a kernel uses none
      if (r.spill_bytes < 0) r.spill_bytes = 0;
    }
  }
  if (!entry.empty()) {
    auto it = per_function.find(std::string(entry));
    if (it != per_function.end()) return it->second;
  }
  PtxasResources all;
  for (const auto& [name, r] : per_function) {
    all.registers = std::max(all.registers, r.registers);
    all.shared_bytes = std::max(all.shared_bytes, r.shared_bytes);
    all.spill_bytes = std::max(all.spill_bytes, r.spill_bytes);
    all.wgmma_serialized = all.wgmma_serialized || r.wgmma_serialized;
  }
  return all;
}

}  // namespace moejit
