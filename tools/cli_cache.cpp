// `moejit cache ls|verify|gc|clear|path`: look after the on-disk kernel cache.
#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <map>
#include <string>

#include "moejit/kernel_cache.hpp"
#include "tools/cli_common.hpp"

namespace moejit::cli {

namespace {

std::string field(const nlohmann::json& m, const char* name) {
  if (m.is_object() && m.contains(name) && m[name].is_string()) return m[name].get<std::string>();
  return "?";
}

long long nested_int(const nlohmann::json& m, const char* group, const char* name) {
  if (!m.is_object() || !m.contains(group) || !m[group].is_object() || !m[group].contains(name)) return -1;
  const auto& v = m[group][name];
  return v.is_number_integer() ? v.get<long long>() : -1;
}

std::string num_or_dash(long long v) { return v < 0 ? "-" : std::to_string(v); }

std::vector<CacheEntryInfo> sorted_entries(const KernelCache& cache) {
  auto entries = cache.list();
  std::sort(entries.begin(), entries.end(), [](const CacheEntryInfo& a, const CacheEntryInfo& b) {
    return std::make_pair(field(a.manifest, "arch"), field(a.manifest, "key")) <
           std::make_pair(field(b.manifest, "arch"), field(b.manifest, "key"));
  });
  return entries;
}

}  // namespace

void print_cache_summary(KernelCache& cache) {
  const auto entries = cache.list();
  std::map<std::string, std::pair<int, double>> per_arch;
  int invalid = 0;
  for (const auto& e : entries) {
    auto& slot = per_arch[field(e.manifest, "arch")];
    ++slot.first;
    const long long size = nested_int(e.manifest, "cubin", "size");
    if (size > 0) slot.second += static_cast<double>(size);
    if (!e.valid) ++invalid;
  }
  fmt::print("cache {}: {} entr{}{}\n", cache.schema_dir(), entries.size(), entries.size() == 1 ? "y" : "ies",
             invalid ? fmt::format(" ({} damaged)", invalid) : "");
  for (const auto& [arch, v] : per_arch)
    fmt::print("  {:<8} {:>4} kernels  {:>10} of cubins\n", arch, v.first, human_bytes(v.second));
}

int cmd_cache(int argc, char** argv) {
  static const CommandSpec spec{
      "cache",
      "ls|verify|gc|clear|path",
      "look after the on-disk kernel cache",
      "  ls      list every entry of this cache schema (architecture, key, cubin size, registers, spills)\n"
      "  verify  check every entry's manifest, size and checksum; damaged entries are moved to quarantine\n"
      "          (and rebuilt on next use); exits 1 when any was damaged or untrusted, or when the runtime\n"
      "          refuses the whole cache (a directory above the entries that others can write, or not a directory)\n"
      "  gc      remove quarantined entries, stale temporary directories and old cache schemas\n"
      "  clear   remove every entry of this cache schema\n"
      "          (gc and clear never follow symlinks and refuse a cache that reads and writes refuse)\n"
      "  path    print the cache root and the schema directory\n"
      "The root is $MOEJIT_CACHE_DIR, else $XDG_CACHE_HOME/moejit, else ~/.cache/moejit.",
      {},
      {"ACTION"}};
  Args args(spec, argc, argv, 2);
  if (args.help()) {
    std::fputs(help_text(spec).c_str(), stdout);
    return kExitOk;
  }
  const std::string action = args.positionals()[0];
  if (action != "ls" && action != "verify" && action != "gc" && action != "clear" && action != "path")
    throw UsageError(fmt::format("ACTION must be ls, verify, gc, clear or path, got '{}'", action));
  CacheOptions opts;
  opts.no_jit = true;  // nothing here compiles
  KernelCache cache(opts);
  if (action == "path") {
    fmt::print("root    {}\nschema  {}\n", cache.root(), cache.schema_dir());
    return kExitOk;
  }
  if (action == "ls") {
    const auto entries = sorted_entries(cache);
    if (entries.empty()) {
      fmt::print("cache {}: empty\n", cache.schema_dir());
      return kExitOk;
    }
    fmt::print("{:<8} {:>9} {:>5} {:>6} {:>6}  {}\n", "arch", "cubin", "regs", "smem", "spill", "key");
    for (const auto& e : entries) {
      const auto& m = e.manifest;
      fmt::print("{:<8} {:>9} {:>5} {:>6} {:>6}  {}{}\n", field(m, "arch"), num_or_dash(nested_int(m, "cubin", "size")),
                 num_or_dash(nested_int(m, "resources", "registers")),
                 num_or_dash(nested_int(m, "resources", "shared_bytes")),
                 num_or_dash(nested_int(m, "resources", "spill_bytes")), field(m, "key"),
                 e.valid ? "" : fmt::format("  [damaged: {}; {}]", e.problem, e.path));
    }
    print_cache_summary(cache);
    return kExitOk;
  }
  if (action == "verify") {
    // The runtime's own verdict first: where it refuses the whole cache, no entry is valid to it.
    const std::string refused = cache.refused_reason();
    if (!refused.empty())
      fmt::print("refused  {}: {}; the runtime reads nothing from and writes nothing to this cache\n", cache.root(),
                 refused);
    const auto entries = cache.verify();
    int damaged = 0, untrusted = 0;
    for (const auto& e : entries) {
      if (e.valid) continue;
      if (!e.trusted) {
        // Never moved: another user may own it; it is not loaded and a fresh compile stays in memory.
        ++untrusted;
        fmt::print("untrusted  {}  {}: {} (left in place, never loaded; fix its permissions or clear the cache)\n",
                   field(e.manifest, "key"), e.path, e.problem);
      } else {
        ++damaged;
        fmt::print("damaged  {}  {}: {} (moved to quarantine; it is rebuilt on next use)\n", field(e.manifest, "key"),
                   e.path, e.problem);
      }
    }
    const int bad = damaged + untrusted;
    fmt::print("verified {} entr{} in {}: {} valid, {} damaged, {} untrusted\n", entries.size(),
               entries.size() == 1 ? "y" : "ies", cache.schema_dir(), entries.size() - static_cast<size_t>(bad), damaged,
               untrusted);
    return bad || !refused.empty() ? kExitFailed : kExitOk;
  }
  if (action == "gc") {
    const int n = cache.gc();
    fmt::print("gc: removed {} item{} (quarantine, stale temporaries, old schemas) under {}\n", n, n == 1 ? "" : "s",
               cache.root());
    return kExitOk;
  }
  const int n = cache.clear();
  fmt::print("clear: removed {} entr{} from {}\n", n, n == 1 ? "y" : "ies", cache.schema_dir());
  return kExitOk;
}

}  // namespace moejit::cli
