// Layer, input and output files of DESIGN §3 on top of the safetensors container.
//
// Layer files are read strictly: every tensor must have exactly its dtype and shape, metadata sizes
// must be integers, and a tensor that does not belong to the layer (a w1 in a gated layer, global
// scales in an MXFP4 layer, an unknown name) is an error, because silently ignoring it would run a
// different layer than the one the file describes. Input and output files only require the tensors
// they define, so an expected-output file with extra tensors (out_f32) still reads as an output file.
#include <bit>
#include <charconv>
#include <cstring>
#include <set>
#include <string>
#include <system_error>
#include <vector>

#include "moejit/error.hpp"
#include "moejit/safetensors.hpp"
#include "reference/csf_tensors.hpp"

namespace moejit {
namespace {

std::string shape_str(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

// Checks that tensor `name` exists with this dtype and shape; returns it.
Tensor& require(SafetensorsFile& f, const std::string& what, const std::string& name, const std::string& dtype,
                const std::vector<int64_t>& shape) {
  auto it = f.tensors.find(name);
  if (it == f.tensors.end()) throw Error(what + ": tensor '" + name + "' is missing");
  Tensor& t = it->second;
  if (t.dtype != dtype) throw Error(what + ": tensor '" + name + "' has dtype " + t.dtype + ", expected " + dtype);
  if (t.shape != shape)
    throw Error(what + ": tensor '" + name + "' has shape " + shape_str(t.shape) + ", expected " + shape_str(shape));
  return t;
}

template <typename T>
std::vector<T> from_bytes(const std::vector<uint8_t>& bytes) {
  std::vector<T> v(bytes.size() / sizeof(T));
  if (!v.empty()) std::memcpy(v.data(), bytes.data(), v.size() * sizeof(T));
  return v;
}

template <typename T>
Tensor to_tensor(const std::string& dtype, std::vector<int64_t> shape, const std::vector<T>& values) {
  Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data.resize(values.size() * sizeof(T));
  if (!values.empty()) std::memcpy(t.data.data(), values.data(), t.data.size());
  return t;
}

const std::string* find_meta(const SafetensorsFile& f, const std::string& key) {
  auto it = f.metadata.find(key);
  return it == f.metadata.end() ? nullptr : &it->second;
}

const std::string& meta(const SafetensorsFile& f, const std::string& what, const std::string& key) {
  const std::string* v = find_meta(f, key);
  if (!v) throw Error(what + ": __metadata__ field '" + key + "' is missing");
  return *v;
}

int parse_int(const std::string& what, const std::string& key, const std::string& s) {
  int v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty())
    throw Error(what + ": __metadata__ field '" + key + "' = '" + s + "' is not an integer");
  return v;
}

float parse_float(const std::string& what, const std::string& key, const std::string& s) {
  float v = 0;
  const auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || p != s.data() + s.size() || s.empty())
    throw Error(what + ": __metadata__ field '" + key + "' = '" + s + "' is not a number");
  return v;
}

// Shortest decimal that reads back as the same float ("1.702", "7").
std::string format_float(float v) {
  char buf[64];
  const auto [p, ec] = std::to_chars(buf, buf + sizeof buf, v);
  return std::string(buf, ec == std::errc() ? p : buf);
}

// Re-throws a vocabulary/spec error with the file it came from.
template <typename Fn>
auto with_context(const std::string& what, Fn&& fn) -> decltype(fn()) {
  try {
    return fn();
  } catch (const Error& e) {
    throw Error(what + ": " + e.what());
  }
}

}  // namespace

HostLayer read_layer_file(const std::string& path) {
  SafetensorsFile f = read_safetensors(path);
  const std::string what = "layer file " + path;

  LayerSpec spec;
  const std::string& format = meta(f, what, "format");
  const std::string& activation = meta(f, what, "activation");
  const std::string& order = meta(f, what, "gate_up_order");
  spec.format = with_context(what, [&] { return parse_scale_format(format); });
  spec.activation = with_context(what, [&] { return parse_activation(activation); });
  spec.gate_up_order = with_context(what, [&] { return parse_gate_up_order(order); });
  spec.experts = parse_int(what, "experts", meta(f, what, "experts"));
  spec.hidden = parse_int(what, "hidden", meta(f, what, "hidden"));
  spec.intermediate = parse_int(what, "intermediate", meta(f, what, "intermediate"));
  spec.top_k = parse_int(what, "top_k", meta(f, what, "top_k"));
  if (auto* s = find_meta(f, "expert_begin")) spec.expert_begin = parse_int(what, "expert_begin", *s);
  if (auto* s = find_meta(f, "swiglu_alpha")) spec.swiglu_alpha = parse_float(what, "swiglu_alpha", *s);
  if (auto* s = find_meta(f, "swiglu_beta")) spec.swiglu_beta = parse_float(what, "swiglu_beta", *s);
  if (auto* s = find_meta(f, "swiglu_limit")) spec.limit = parse_float(what, "swiglu_limit", *s);
  // The activation precision (docs/LAYER_FILES.md); a16 when absent, as in files written before it existed.
  if (auto* s = find_meta(f, "precision")) spec.precision = with_context(what, [&] { return parse_act_precision(*s); });

  with_context(what, [&] { spec.validate(); });

  // Every tensor name this kind of layer may hold; anything else in the file is an error (reported
  // before anything else about tensors: a w13 in a relu2 file says more than "w1 is missing").
  const bool gated = is_gated(spec.activation);
  const std::string fc1 = gated ? "w13" : "w1";
  std::set<std::string> allowed = {fc1, fc1 + "_scale", "w2", "w2_scale", fc1 + "_bias", "w2_bias"};
  if (spec.format == ScaleFormat::nvfp4) allowed.insert({fc1 + "_global_scale", "w2_global_scale"});
  if (spec.precision == ActPrecision::a4) allowed.insert({"a1_gs", "a2_gs"});
  // Scale planes in the compressed scale format (docs/CSF.md), announced by __metadata__ scale_storage.
  const std::string* storage = find_meta(f, detail::kScaleStorageField);
  if (storage && *storage != detail::kScaleStorageCsf)
    throw Error(what + ": __metadata__ field 'scale_storage' = '" + *storage + "' is not 'csf'");
  if (storage)
    for (const std::string& plane : {fc1 + "_scale", std::string("w2_scale")})
      for (const auto& n : detail::csf_tensor_names(plane)) allowed.insert(n);
  for (const auto& [name, t] : f.tensors) {
    if (allowed.count(name)) continue;
    if (name.find("_csf_") != std::string::npos && !storage)
      throw Error(what + ": unexpected tensor '" + name + "': CSF scale tensors need __metadata__ scale_storage = csf");
    std::string why = "it does not belong to a " + std::string(to_string(spec.format)) + " " +
                      std::string(to_string(spec.activation)) + " layer (expected:";
    for (const auto& a : allowed) why += " " + a;
    throw Error(what + ": unexpected tensor '" + name + "': " + why + ")");
  }

  // Biases are optional but come in pairs; their presence is the layer's has_bias.
  const bool has_fc1_bias = f.tensors.count(fc1 + "_bias") > 0, has_fc2_bias = f.tensors.count("w2_bias") > 0;
  if (has_fc1_bias != has_fc2_bias)
    throw Error(what + ": tensor '" + (has_fc1_bias ? std::string("w2_bias") : fc1 + "_bias") +
                "' is missing (biases come in pairs)");
  spec.has_bias = has_fc1_bias;

  const int64_t E = spec.experts, H = spec.hidden, I = spec.intermediate, rows = spec.fc1_rows();
  const int64_t block = scale_block(spec.format);
  HostLayer L;
  L.spec = spec;
  L.w13 = std::move(require(f, what, fc1, "U8", {E, rows, H / 2}).data);
  L.w2 = std::move(require(f, what, "w2", "U8", {E, H, I / 2}).data);
  // Each scale plane is its plain tensor or, in a CSF file, its five CSF tensors (never both).
  auto scale_plane = [&](const std::string& plane, int64_t plane_rows, int64_t per_row, std::vector<uint8_t>& plain,
                         std::optional<CsfPlane>& csf) {
    if (!storage || !detail::has_any_csf_tensor(f, plane)) {
      plain = std::move(require(f, what, plane, "U8", {E, plane_rows, per_row}).data);
      return;
    }
    if (f.tensors.count(plane))
      throw Error(what + ": tensor '" + plane + "' and its CSF tensors are both present (a plane is stored one way)");
    csf = detail::read_csf_plane(f, what, plane, spec.format, E, plane_rows, per_row);
  };
  scale_plane(fc1 + "_scale", rows, H / block, L.w13_scale, L.w13_scale_csf);
  scale_plane("w2_scale", H, I / block, L.w2_scale, L.w2_scale_csf);
  if (spec.format == ScaleFormat::nvfp4) {
    // [E], or [E, 2] (gate, up scaled apart; gated layers only: HostLayer::w13_global_scale).
    const auto gs = f.tensors.find(fc1 + "_global_scale");
    const bool split = gated && gs != f.tensors.end() && gs->second.shape.size() == 2;
    L.w13_global_scale = from_bytes<float>(
        require(f, what, fc1 + "_global_scale", "F32", split ? std::vector<int64_t>{E, 2} : std::vector<int64_t>{E}).data);
    L.w2_global_scale = from_bytes<float>(require(f, what, "w2_global_scale", "F32", {E}).data);
  }
  if (spec.has_bias) {
    L.w13_bias = from_bytes<float>(require(f, what, fc1 + "_bias", "F32", {E, rows}).data);
    L.w2_bias = from_bytes<float>(require(f, what, "w2_bias", "F32", {E, H}).data);
  }
  if (spec.precision == ActPrecision::a4) {
    // [1] (one scale for every expert) or [E].
    for (const auto& [name, dst] : {std::pair{"a1_gs", &L.a1_gs}, std::pair{"a2_gs", &L.a2_gs}}) {
      const auto t = f.tensors.find(name);
      const bool one = t != f.tensors.end() && t->second.shape == std::vector<int64_t>{1};
      *dst = from_bytes<float>(require(f, what, name, "F32", one ? std::vector<int64_t>{1} : std::vector<int64_t>{E}).data);
    }
  }
  with_context(what, [&] { L.validate(); });
  return L;
}

void write_layer_file(const std::string& path, const HostLayer& L) {
  L.validate();
  const LayerSpec& s = L.spec;
  const int64_t E = s.experts, H = s.hidden, I = s.intermediate, rows = s.fc1_rows();
  const int64_t block = scale_block(s.format);
  const std::string fc1 = is_gated(s.activation) ? "w13" : "w1";

  SafetensorsFile f;
  f.tensors[fc1] = to_tensor("U8", {E, rows, H / 2}, L.w13);
  f.tensors["w2"] = to_tensor("U8", {E, H, I / 2}, L.w2);
  if (L.w13_scale_csf) detail::put_csf_plane(f, fc1 + "_scale", E, rows, *L.w13_scale_csf);
  else f.tensors[fc1 + "_scale"] = to_tensor("U8", {E, rows, H / block}, L.w13_scale);
  if (L.w2_scale_csf) detail::put_csf_plane(f, "w2_scale", E, H, *L.w2_scale_csf);
  else f.tensors["w2_scale"] = to_tensor("U8", {E, H, I / block}, L.w2_scale);
  if (s.format == ScaleFormat::nvfp4) {
    f.tensors[fc1 + "_global_scale"] =
        to_tensor("F32", L.has_split_fc1_global_scale() ? std::vector<int64_t>{E, 2} : std::vector<int64_t>{E},
                  L.w13_global_scale);
    f.tensors["w2_global_scale"] = to_tensor("F32", {E}, L.w2_global_scale);
  }
  if (s.has_bias) {
    f.tensors[fc1 + "_bias"] = to_tensor("F32", {E, rows}, L.w13_bias);
    f.tensors["w2_bias"] = to_tensor("F32", {E, H}, L.w2_bias);
  }
  f.metadata = {{"format", std::string(to_string(s.format))},
                {"activation", std::string(to_string(s.activation))},
                {"gate_up_order", std::string(to_string(s.gate_up_order))},
                {"experts", std::to_string(s.experts)},
                {"hidden", std::to_string(s.hidden)},
                {"intermediate", std::to_string(s.intermediate)},
                {"top_k", std::to_string(s.top_k)},
                {"expert_begin", std::to_string(s.expert_begin)}};
  // alpha and beta only mean something to swigluoai; other layers keep the defaults when read back.
  if (s.activation == Activation::swigluoai) {
    f.metadata["swiglu_alpha"] = format_float(s.swiglu_alpha);
    f.metadata["swiglu_beta"] = format_float(s.swiglu_beta);
  }
  if (s.limit) f.metadata["swiglu_limit"] = format_float(*s.limit);
  if (s.precision != ActPrecision::a16) f.metadata["precision"] = std::string(to_string(s.precision));
  if (s.precision == ActPrecision::a4) {
    f.tensors["a1_gs"] = to_tensor("F32", {static_cast<int64_t>(L.a1_gs.size())}, L.a1_gs);
    f.tensors["a2_gs"] = to_tensor("F32", {static_cast<int64_t>(L.a2_gs.size())}, L.a2_gs);
  }
  if (L.w13_scale_csf || L.w2_scale_csf) f.metadata[detail::kScaleStorageField] = detail::kScaleStorageCsf;
  write_safetensors(path, f);
}

HostInputs read_input_file(const std::string& path) {
  SafetensorsFile f = read_safetensors(path);
  const std::string what = "input file " + path;
  auto x_it = f.tensors.find("x");
  auto ids_it = f.tensors.find("topk_ids");
  if (x_it == f.tensors.end()) throw Error(what + ": tensor 'x' is missing");
  if (ids_it == f.tensors.end()) throw Error(what + ": tensor 'topk_ids' is missing");
  if (x_it->second.shape.size() != 2)
    throw Error(what + ": tensor 'x' has shape " + shape_str(x_it->second.shape) + ", expected [M, H]");
  if (ids_it->second.shape.size() != 2)
    throw Error(what + ": tensor 'topk_ids' has shape " + shape_str(ids_it->second.shape) + ", expected [M, K]");
  const int64_t M = x_it->second.shape[0], H = x_it->second.shape[1], K = ids_it->second.shape[1];
  HostInputs in;
  in.tokens = static_cast<int>(M);
  in.hidden = static_cast<int>(H);
  in.top_k = static_cast<int>(K);
  in.x = from_bytes<uint16_t>(require(f, what, "x", "BF16", {M, H}).data);
  in.topk_ids = from_bytes<int32_t>(require(f, what, "topk_ids", "I32", {M, K}).data);
  in.topk_weights = from_bytes<float>(require(f, what, "topk_weights", "F32", {M, K}).data);
  return in;
}

void write_input_file(const std::string& path, const HostInputs& in) {
  const int64_t M = in.tokens, H = in.hidden, K = in.top_k;
  auto check = [&](const char* name, size_t got, int64_t want) {
    if (M < 0 || H < 0 || K < 0 || got != static_cast<size_t>(want))
      throw Error("input file " + path + ": " + name + " has " + std::to_string(got) + " values, expected " +
                  std::to_string(want) + " (tokens " + std::to_string(M) + ", hidden " + std::to_string(H) +
                  ", top_k " + std::to_string(K) + ")");
  };
  check("x", in.x.size(), M * H);
  check("topk_ids", in.topk_ids.size(), M * K);
  check("topk_weights", in.topk_weights.size(), M * K);
  SafetensorsFile f;
  f.tensors["x"] = to_tensor("BF16", {M, H}, in.x);
  f.tensors["topk_ids"] = to_tensor("I32", {M, K}, in.topk_ids);
  f.tensors["topk_weights"] = to_tensor("F32", {M, K}, in.topk_weights);
  write_safetensors(path, f);
}

std::vector<uint16_t> read_output_file(const std::string& path, int* tokens, int* hidden) {
  SafetensorsFile f = read_safetensors(path);
  const std::string what = "output file " + path;
  auto it = f.tensors.find("out");
  if (it == f.tensors.end()) throw Error(what + ": tensor 'out' is missing");
  if (it->second.shape.size() != 2)
    throw Error(what + ": tensor 'out' has shape " + shape_str(it->second.shape) + ", expected [M, H]");
  const int64_t M = it->second.shape[0], H = it->second.shape[1];
  auto out = from_bytes<uint16_t>(require(f, what, "out", "BF16", {M, H}).data);
  if (tokens) *tokens = static_cast<int>(M);
  if (hidden) *hidden = static_cast<int>(H);
  return out;
}

void write_output_file(const std::string& path, const std::vector<uint16_t>& out, int tokens, int hidden) {
  if (tokens < 0 || hidden < 0 || out.size() != static_cast<size_t>(tokens) * static_cast<size_t>(hidden))
    throw Error("output file " + path + ": out has " + std::to_string(out.size()) + " values, expected tokens " +
                std::to_string(tokens) + " * hidden " + std::to_string(hidden));
  SafetensorsFile f;
  f.tensors["out"] = to_tensor("BF16", {tokens, hidden}, out);
  write_safetensors(path, f);
}

}  // namespace moejit
