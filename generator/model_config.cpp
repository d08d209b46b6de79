// Model configs: JSON geometry of one MoE layer of a real model, and its TP/EP slicing.
//
// Parsing is strict: every field is type-checked, unknown fields are errors (a typo such as
// "top-k" must not silently fall back to a default), and every message names the origin (file or
// bundled config) and the field.
#include "moejit/model_config.hpp"

#include <fcntl.h>
#include <sys/stat.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>

#include "core/regular_file.hpp"
#include "generator/embedded_files.hpp"
#include "reference/json_limits.hpp"
#include "moejit/error.hpp"

namespace moejit {

namespace {

using nlohmann::json;

// Fields a config may carry, in the order they are documented (docs/CONFIGS.md).
const std::vector<std::string>& known_fields() {
  static const std::vector<std::string> fields = {
      "name",         "description",   "source",       "format",       "activation", "experts",
      "hidden",       "intermediate",  "top_k",        "bias",         "gate_up_order",
      "swiglu_alpha", "swiglu_beta",   "swiglu_limit", "tp",           "ep",         "ep_rank",
      "precision"};
  return fields;
}

struct Reader {
  const json& j;
  const std::string& origin;

  [[noreturn]] void fail(std::string_view field, const std::string& rule) const {
    throw Error(fmt::format("{}: field '{}': {}", origin, field, rule));
  }

  const json* find(std::string_view field) const {
    auto it = j.find(std::string(field));
    return it == j.end() ? nullptr : &*it;
  }

  const json& need(std::string_view field) const {
    const json* v = find(field);
    if (!v) fail(field, "is required");
    return *v;
  }

  std::string string(std::string_view field) const {
    const json& v = need(field);
    if (!v.is_string()) fail(field, fmt::format("expected a string, got {}", v.dump()));
    return v.get<std::string>();
  }

  std::string string_or(std::string_view field, std::string fallback) const {
    return find(field) ? string(field) : std::move(fallback);
  }

  int integer(std::string_view field, int min_value) const {
    const json& v = need(field);
    if (!v.is_number_integer()) fail(field, fmt::format("expected an integer, got {}", v.dump()));
    const auto x = v.get<int64_t>();
    if (x < min_value || x > std::numeric_limits<int>::max())
      fail(field, fmt::format("must be an integer >= {}, got {}", min_value, x));
    return static_cast<int>(x);
  }

  int integer_or(std::string_view field, int min_value, int fallback) const {
    return find(field) ? integer(field, min_value) : fallback;
  }

  double number(std::string_view field) const {
    const json& v = need(field);
    if (!v.is_number()) fail(field, fmt::format("expected a number, got {}", v.dump()));
    const double x = v.get<double>();
    if (!std::isfinite(x)) fail(field, "must be finite");
    return x;
  }

  bool boolean_or(std::string_view field, bool fallback) const {
    const json* v = find(field);
    if (!v) return fallback;
    if (!v->is_boolean()) fail(field, fmt::format("expected true or false, got {}", v->dump()));
    return v->get<bool>();
  }

  // Enum fields: the parse_* functions of types.hpp name the accepted values; we add origin and field.
  template <class Fn>
  auto enumeration(std::string_view field, Fn parse) const {
    const std::string s = string(field);
    try {
      return parse(s);
    } catch (const Error& e) {
      fail(field, e.what());
    }
  }
};

// Model configs are a few hundred bytes; 1 MiB leaves room for comments in descriptions and refuses
// a wrong path (a weights file, a device) before reading it whole.
constexpr std::size_t kMaxConfigBytes = std::size_t(1) << 20;

std::string read_text_file(const std::string& path) {
  try {
    struct stat st;
    const std::vector<char> text = detail::read_regular_file(AT_FDCWD, path, kMaxConfigBytes, /*follow_symlinks=*/true, &st);
    return std::string(text.begin(), text.end());
  } catch (const detail::FsError& e) {
    throw Error(fmt::format("model config '{}': {}", path, e.what()));
  }
}

}  // namespace

LayerSpec ModelConfig::local() const {
  const std::string who = fmt::format("model config '{}'", name.empty() ? "?" : name);
  if (tp < 1) throw Error(fmt::format("{}: tp must be >= 1, got {}", who, tp));
  if (ep < 1) throw Error(fmt::format("{}: ep must be >= 1, got {}", who, ep));
  if (ep_rank < 0 || ep_rank >= ep)
    throw Error(fmt::format("{}: ep_rank must be in [0, ep) = [0, {}), got {}", who, ep, ep_rank));
  if (global.experts % ep != 0)
    throw Error(fmt::format("{}: experts = {} is not divisible by ep = {}", who, global.experts, ep));
  if (global.intermediate % tp != 0)
    throw Error(fmt::format("{}: intermediate = {} is not divisible by tp = {}", who, global.intermediate, tp));
  LayerSpec s = global;
  s.experts = global.experts / ep;
  s.expert_begin = global.expert_begin + ep_rank * (global.experts / ep);
  s.intermediate = global.intermediate / tp;
  const int block = scale_block(s.format);
  if (s.intermediate % block != 0)
    throw Error(fmt::format("{}: intermediate / tp = {} / {} = {} is not a multiple of the {} scale block {}", who,
                            global.intermediate, tp, s.intermediate, to_string(s.format), block));
  s.validate();
  return s;
}

ModelConfig parse_model_config(const std::string& json_text, const std::string& origin) {
  // Bounded nesting first: parsing is iterative, but what is done with the parsed value recurses.
  if (auto why = detail::json_depth_problem(json_text); !why.empty())
    throw Error(fmt::format("{}: not a usable model config: the JSON {}", origin, why));
  json j;
  try {
    j = json::parse(json_text);
  } catch (const json::exception& e) {
    // parse_error, and out_of_range for a number no double holds (2.2e2222): both are the file's fault.
    throw Error(fmt::format("{}: not valid JSON: {}", origin, e.what()));
  }
  if (!j.is_object()) throw Error(fmt::format("{}: a model config must be a JSON object", origin));

  const auto& known = known_fields();
  for (const auto& [field, value] : j.items()) {
    (void)value;
    if (std::find(known.begin(), known.end(), field) == known.end())
      throw Error(fmt::format("{}: field '{}' is unknown (known fields: {})", origin, field, fmt::join(known, ", ")));
  }

  Reader r{j, origin};
  ModelConfig c;
  c.name = r.string("name");
  if (c.name.empty()) r.fail("name", "must not be empty");
  (void)r.string_or("description", "");
  (void)r.string_or("source", "");

  LayerSpec& s = c.global;
  s.format = r.enumeration("format", parse_scale_format);
  s.activation = r.enumeration("activation", parse_activation);
  s.experts = r.integer("experts", 1);
  s.hidden = r.integer("hidden", 1);
  s.intermediate = r.integer("intermediate", 1);
  s.top_k = r.integer("top_k", 1);
  s.has_bias = r.boolean_or("bias", false);
  // The activation precision the model was calibrated for (docs/CONFIGS.md); a16 when absent.
  s.precision = r.find("precision") ? r.enumeration("precision", parse_act_precision) : ActPrecision::a16;
  s.gate_up_order = r.find("gate_up_order") ? r.enumeration("gate_up_order", parse_gate_up_order) : GateUpOrder::gate_up;
  if (s.activation == Activation::relu2 && r.find("gate_up_order") && s.gate_up_order != GateUpOrder::gate_up)
    r.fail("gate_up_order", "relu2 has a single FC1 matrix (w1); gate_up_order does not apply");
  const bool swiglu_params = r.find("swiglu_alpha") || r.find("swiglu_beta");
  if (swiglu_params && s.activation != Activation::swigluoai)
    r.fail(r.find("swiglu_alpha") ? "swiglu_alpha" : "swiglu_beta",
           fmt::format("only applies to the swigluoai activation (this config uses {})", to_string(s.activation)));
  if (r.find("swiglu_alpha")) s.swiglu_alpha = static_cast<float>(r.number("swiglu_alpha"));
  if (r.find("swiglu_beta")) s.swiglu_beta = static_cast<float>(r.number("swiglu_beta"));
  if (r.find("swiglu_limit") && !r.need("swiglu_limit").is_null()) {
    if (s.activation != Activation::silu && s.activation != Activation::swigluoai)
      r.fail("swiglu_limit", fmt::format("a clamp limit applies to silu and swigluoai only (this config uses {})",
                                         to_string(s.activation)));
    const double L = r.number("swiglu_limit");
    if (!(L > 0)) r.fail("swiglu_limit", fmt::format("must be > 0, got {}", L));
    s.limit = static_cast<float>(L);
  }
  if (s.top_k > s.experts)
    r.fail("top_k", fmt::format("top_k = {} exceeds experts = {}", s.top_k, s.experts));
  const int block = scale_block(s.format);
  if (s.hidden % block != 0)
    r.fail("hidden", fmt::format("{} is not a multiple of the {} scale block {}", s.hidden, to_string(s.format), block));
  if (s.intermediate % block != 0)
    r.fail("intermediate",
           fmt::format("{} is not a multiple of the {} scale block {}", s.intermediate, to_string(s.format), block));

  c.tp = r.integer_or("tp", 1, 1);
  c.ep = r.integer_or("ep", 1, 1);
  c.ep_rank = r.integer_or("ep_rank", 0, 0);
  if (c.ep_rank >= c.ep) r.fail("ep_rank", fmt::format("must be < ep = {}, got {}", c.ep, c.ep_rank));
  if (s.experts % c.ep != 0)
    r.fail("ep", fmt::format("experts = {} is not divisible by ep = {}", s.experts, c.ep));
  if (s.intermediate % c.tp != 0)
    r.fail("tp", fmt::format("intermediate = {} is not divisible by tp = {}", s.intermediate, c.tp));
  if ((s.intermediate / c.tp) % block != 0)
    r.fail("tp", fmt::format("intermediate / tp = {} is not a multiple of the {} scale block {}",
                             s.intermediate / c.tp, to_string(s.format), block));
  try {
    (void)c.local();
  } catch (const Error& e) {
    throw Error(fmt::format("{}: {}", origin, e.what()));
  }
  return c;
}

std::vector<std::string> bundled_config_names() {
  std::vector<std::string> names;
  for (const auto& f : detail::embedded_configs()) {
    std::string n(f.name);
    if (n.size() > 5 && n.compare(n.size() - 5, 5, ".json") == 0) n.resize(n.size() - 5);
    names.push_back(n);
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string default_config_name() { return "gpt-oss-120b"; }

ModelConfig load_model_config(const std::string& path_or_name) {
  if (path_or_name.empty())
    throw Error(fmt::format("model config: empty name (bundled configs: {})", fmt::join(bundled_config_names(), ", ")));
  std::error_code ec;
  // Anything at that path is the config the user means; read_text_file refuses what is not a regular
  // file (a FIFO, a directory) without opening it for blocking reads.
  if (std::filesystem::exists(path_or_name, ec)) return parse_model_config(read_text_file(path_or_name), path_or_name);
  std::string want = path_or_name;
  if (want.size() < 5 || want.compare(want.size() - 5, 5, ".json") != 0) want += ".json";
  for (const auto& f : detail::embedded_configs())
    if (f.name == want) return parse_model_config(std::string(f.content), fmt::format("bundled config {}", f.name));
  throw Error(fmt::format("model config '{}': no such file and no bundled config of that name (bundled: {})",
                          path_or_name, fmt::join(bundled_config_names(), ", ")));
}

}  // namespace moejit
