// Argument parsing and the small resolution helpers every subcommand shares.
#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <sstream>

#include "moejit/error.hpp"
#include "moejit/runtime.hpp"
#include "tools/cli_common.hpp"

namespace moejit::cli {

std::string prog(const std::string& command) { return command.empty() ? "moejit" : "moejit " + command; }

std::string help_text(const CommandSpec& spec) {
  std::string s = fmt::format("usage: moejit {} {}\n\n{}\n", spec.name, spec.synopsis, spec.description);
  if (!spec.options.empty()) {
    s += "\noptions:\n";
    size_t width = 0;
    std::vector<std::string> lefts;
    for (const auto& o : spec.options) {
      lefts.push_back(o.metavar.empty() ? "--" + o.name : "--" + o.name + " " + o.metavar);
      width = std::max(width, lefts.back().size());
    }
    lefts.push_back("--help");
    width = std::max(width, lefts.back().size());
    for (size_t i = 0; i < spec.options.size(); ++i)
      s += fmt::format("  {:<{}}  {}\n", lefts[i], width, spec.options[i].help);
    s += fmt::format("  {:<{}}  {}\n", lefts.back(), width, "show this help");
  }
  s += "\nexit status: 0 success; 1 the work ran but its result is bad; 2 error (bad arguments, missing GPU, ...)\n";
  return s;
}

Args::Args(const CommandSpec& spec, int argc, char** argv, int first) : spec_(spec) {
  auto find = [&](std::string_view name) -> const OptionSpec* {
    for (const auto& o : spec.options)
      if (o.name == name) return &o;
    return nullptr;
  };
  for (int i = first; i < argc; ++i)
    if (std::string_view a = argv[i]; a == "--help" || a == "-h") {
      help_ = true;
      return;
    }
  bool only_positionals = false;
  for (int i = first; i < argc; ++i) {
    std::string a = argv[i];
    if (only_positionals || a.size() < 2 || a[0] != '-' || (a[1] != '-' && !std::isalpha(static_cast<unsigned char>(a[1])))) {
      positionals_.push_back(a);
      continue;
    }
    if (a == "--") {
      only_positionals = true;
      continue;
    }
    if (a[1] != '-') throw UsageError(fmt::format("unknown option '{}' (options are spelled --name)", a));
    std::string name = a.substr(2), value;
    bool inline_value = false;
    if (auto eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
      inline_value = true;
    }
    const OptionSpec* o = find(name);
    if (!o) throw UsageError(fmt::format("unknown option '--{}'", name));
    if (o->metavar.empty()) {
      if (inline_value) throw UsageError(fmt::format("option '--{}' takes no value", name));
      values_.emplace_back(name, "1");
      continue;
    }
    if (!inline_value) {
      if (i + 1 >= argc) throw UsageError(fmt::format("option '--{}' needs a value ({})", name, o->metavar));
      value = argv[++i];
    }
    values_.emplace_back(name, value);
  }
  const size_t need = spec.positionals.size();
  const size_t most = spec.max_positionals < 0 ? need : static_cast<size_t>(spec.max_positionals);
  if (positionals_.size() < need)
    throw UsageError(fmt::format("missing argument {}", spec.positionals[positionals_.size()]));
  if (positionals_.size() > most)
    throw UsageError(fmt::format("unexpected argument '{}'", positionals_[most]));
}

bool Args::has(const std::string& name) const {
  return std::any_of(values_.begin(), values_.end(), [&](const auto& v) { return v.first == name; });
}

std::string Args::str(const std::string& name, const std::string& fallback) const {
  for (auto it = values_.rbegin(); it != values_.rend(); ++it)
    if (it->first == name) return it->second;
  return fallback;
}

namespace {
bool parse_int(std::string_view s, int& out) {
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), out);
  return ec == std::errc() && p == s.data() + s.size() && !s.empty();
}
}  // namespace

int Args::integer(const std::string& name, int fallback, int min_value, int max_value) const {
  if (!has(name)) return fallback;
  const std::string s = str(name);
  int v = 0;
  if (!parse_int(s, v)) throw UsageError(fmt::format("--{} expects an integer, got '{}'", name, s));
  if (v < min_value || v > max_value)
    throw UsageError(fmt::format("--{} must be in [{}, {}], got {}", name, min_value, max_value, v));
  return v;
}

std::vector<int> Args::int_list(const std::string& name, const std::vector<int>& fallback, int min_value,
                                int max_value) const {
  if (!has(name)) return fallback;
  const std::string s = str(name);
  std::vector<int> out;
  std::stringstream ss(s);
  std::string item;
  auto bad = [&](const std::string& why) {
    return UsageError(fmt::format("--{} expects a comma-separated list of integers or ranges like 1,2,4 or 1-8; "
                                  "'{}' {}", name, s, why));
  };
  while (std::getline(ss, item, ',')) {
    int a = 0, b = 0;
    if (auto dash = item.find('-'); dash != std::string::npos && dash > 0) {
      if (!parse_int(std::string_view(item).substr(0, dash), a) || !parse_int(std::string_view(item).substr(dash + 1), b))
        throw bad(fmt::format("has '{}'", item));
      if (b < a) throw bad(fmt::format("has the empty range '{}'", item));
    } else {
      if (!parse_int(item, a)) throw bad(fmt::format("has '{}'", item));
      b = a;
    }
    if (a < min_value || b > max_value)
      throw UsageError(fmt::format("--{}: values must be in [{}, {}], got '{}'", name, min_value, max_value, item));
    for (int v = a; v <= b; ++v) out.push_back(v);
  }
  if (out.empty()) throw bad("is empty");
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

ModelConfig config_from_args(const Args& args, const std::string& option) {
  if (auto from_checkpoint = checkpoint_config_from_args(args)) return *from_checkpoint;
  const std::string name = args.str(option, default_config_name());
  try {
    return load_model_config(name);
  } catch (const Error& e) {
    throw UsageError(fmt::format("--{}: {}", option, e.what()));
  }
}

Arch arch_from_args(const Args& args, std::optional<Arch> fallback, std::string* note) {
  if (args.has("arch")) {
    try {
      return parse_arch(args.str("arch"));
    } catch (const Error& e) {
      throw UsageError(fmt::format("--arch: {}", e.what()));
    }
  }
  const GpuProbe& gpu = gpu_probe();
  if (gpu.usable()) {
    if (note) *note = fmt::format("{} ({}, {} SMs)", to_string(*gpu.info.arch), gpu.info.name, gpu.info.sm_count);
    return *gpu.info.arch;
  }
  if (fallback) {
    if (note)
      *note = fmt::format("{} (default: {}; pass --arch to choose)", to_string(*fallback),
                          gpu.present ? gpu.why : "no GPU found");
    return *fallback;
  }
  throw UsageError(fmt::format("--arch is required when no usable GPU is present ({}); give {}", gpu.why,
                               arch_names()));
}

int sm_count_from_args(const Args& args, Arch arch, std::string* note) {
  const ArchLimits& limits = arch_limits(arch);
  if (args.has("sm-count")) return args.integer("sm-count", limits.default_sm_count, 1, 100000);
  const GpuProbe& gpu = gpu_probe();
  if (gpu.usable() && *gpu.info.arch == arch) return gpu.info.sm_count;
  // Plans depend on the SM count: keys prewarmed for another count may be missed by the target server.
  if (note)
    *note = fmt::format("the {}'s, assumed: {}; pass --sm-count for the target GPU", limits.default_gpu,
                        gpu.usable() ? fmt::format("this machine's GPU is {}, not {}", to_string(*gpu.info.arch),
                                                   to_string(arch))
                                     : std::string("no usable GPU here"));
  return limits.default_sm_count;
}

ActPrecision precision_from_args(const Args& args, ActPrecision fallback) {
  if (!args.has("precision")) return fallback;
  try {
    return parse_act_precision(args.str("precision", ""));
  } catch (const Error& e) {
    throw UsageError(fmt::format("--precision: {}", e.what()));
  }
}

std::string describe_spec(const LayerSpec& s) {
  std::string d = fmt::format("{} {} E={} (experts {}..{}) H={} I={} top_k={}", to_string(s.format),
                              to_string(s.activation), s.experts, s.expert_begin, s.expert_begin + s.experts - 1,
                              s.hidden, s.intermediate, s.top_k);
  if (s.has_bias) d += " bias";
  if (s.limit) d += fmt::format(" limit={}", *s.limit);
  if (s.activation == Activation::swigluoai) d += fmt::format(" alpha={} beta={}", s.swiglu_alpha, s.swiglu_beta);
  if (is_gated(s.activation)) d += fmt::format(" {}", to_string(s.gate_up_order));
  if (s.precision != ActPrecision::a16) d += fmt::format(" {}", to_string(s.precision));
  return d;
}

std::string human_bytes(double b) {
  const char* units[] = {"B", "KB", "MB", "GB", "TB"};
  int u = 0;
  while (b >= 1000 && u < 4) {
    b /= 1000;
    ++u;
  }
  return u == 0 ? fmt::format("{:.0f} {}", b, units[u]) : fmt::format("{:.2f} {}", b, units[u]);
}

}  // namespace moejit::cli
