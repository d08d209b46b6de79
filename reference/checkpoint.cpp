// Checkpoint loading (include/moejit/checkpoint.hpp): which layout a checkpoint uses, slice checks, and
// helpers both layouts share. The layouts themselves are checkpoint_modelopt.cpp and checkpoint_gptoss.cpp.
#include "moejit/checkpoint.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <set>

#include "moejit/error.hpp"
#include "reference/checkpoint_formats.hpp"

namespace moejit {
namespace detail {

std::vector<int> find_layers(const CheckpointFiles& files, const std::regex& pattern, const std::string& expected,
                             std::string* prefix) {
  std::set<int> layers;
  std::set<std::string> prefixes;
  std::smatch m;
  for (const std::string& name : files.names()) {
    if (name.find("experts") == std::string::npos || !std::regex_match(name, m, pattern)) continue;
    prefixes.insert(m[1].str());
    if (m[2].length() > 6)  // no model has a million layers; and std::stoi would throw its own error
      throw Error(fmt::format("checkpoint {}: tensor '{}' names layer {}, which is out of range", files.dir(), name,
                              m[2].str()));
    layers.insert(std::stoi(m[2].str()));
  }
  if (prefixes.size() > 1)
    throw Error(fmt::format("checkpoint {}: expert tensors under two prefixes ('{}' and '{}'); one model per checkpoint",
                            files.dir(), *prefixes.begin(), *std::next(prefixes.begin())));
  if (prefixes.empty()) throw Error(fmt::format("checkpoint {}: no tensor named {}", files.dir(), expected));
  *prefix = *prefixes.begin();
  return {layers.begin(), layers.end()};
}

void append_block(std::vector<uint8_t>& dst, const std::vector<uint8_t>& src, int64_t row_bytes, int64_t row0,
                  int64_t rows, int64_t col0, int64_t cols) {
  for (int64_t r = row0; r < row0 + rows; ++r) {
    const uint8_t* p = src.data() + r * row_bytes + col0;
    dst.insert(dst.end(), p, p + cols);
  }
}

Activation activation_from_hidden_act(const CheckpointFiles& files) {
  const auto& c = files.config();
  if (!files.config_has("hidden_act") || !c["hidden_act"].is_string())
    throw Error(fmt::format("checkpoint {}: config.json has no string field 'hidden_act'", files.dir()));
  const std::string act = c["hidden_act"].get<std::string>();
  if (act == "silu" || act == "swish") return Activation::silu;
  if (act == "gelu_pytorch_tanh" || act == "gelu_tanh") return Activation::gelu_tanh;
  throw Error(fmt::format("checkpoint {}: config.json hidden_act '{}' is not an activation moejit computes for "
                          "gated experts (silu, gelu_pytorch_tanh)",
                          files.dir(), act));
}

}  // namespace detail

namespace {

using detail::CheckpointFiles;

// The layout a checkpoint announces: hf_quant_config.json (ModelOpt's own file) first, then
// config.json's quantization_config.
CheckpointFormat detect_format(const CheckpointFiles& files) {
  const std::string& dir = files.dir();
  const auto& hq = files.hf_quant_config();
  const char* supported = "moejit loads ModelOpt NVFP4 and gpt-oss MXFP4 checkpoints (docs/CHECKPOINTS.md)";
  auto modelopt_algo = [&](const nlohmann::json& q, const std::string& where) {
    const auto algo = q.find("quant_algo");
    if (algo == q.end() || !algo->is_string())
      throw Error(fmt::format("checkpoint {}: {} has no string 'quant_algo'; {}", dir, where, supported));
    if (algo->get<std::string>() != "NVFP4")
      throw Error(fmt::format("checkpoint {}: {} quant_algo is '{}', not NVFP4; {}", dir, where, algo->get<std::string>(),
                              supported));
    const auto group = q.find("group_size");
    if (group != q.end() && !(group->is_number_integer() && group->get<int>() == 16))
      throw Error(fmt::format("checkpoint {}: {} group_size is {}; NVFP4 scales blocks of 16", dir, where, group->dump()));
    return CheckpointFormat::modelopt_nvfp4;
  };
  if (hq.is_object()) {
    const auto q = hq.find("quantization");
    if (q == hq.end() || !q->is_object())
      throw Error(fmt::format("checkpoint {}: hf_quant_config.json has no object 'quantization'", dir));
    return modelopt_algo(*q, "hf_quant_config.json quantization");
  }
  const auto& c = files.config();
  const auto qc = c.find("quantization_config");
  if (qc == c.end() || !qc->is_object())
    throw Error(fmt::format("checkpoint {}: neither hf_quant_config.json nor config.json's quantization_config says "
                            "how the weights are quantized; {}",
                            dir, supported));
  const auto method = qc->find("quant_method");
  const std::string m = method != qc->end() && method->is_string() ? method->get<std::string>() : "";
  if (m == "modelopt") return modelopt_algo(*qc, "config.json quantization_config");
  if (m == "mxfp4") return CheckpointFormat::gpt_oss_mxfp4;
  throw Error(fmt::format("checkpoint {}: config.json quantization_config quant_method is '{}'; {}", dir, m, supported));
}

CheckpointInfo inspect(const CheckpointFiles& files) {
  CheckpointInfo info = detect_format(files) == CheckpointFormat::modelopt_nvfp4 ? detail::inspect_modelopt(files)
                                                                                 : detail::inspect_gpt_oss(files);
  info.dir = files.dir();
  const auto& c = files.config();
  info.model_type = c.contains("model_type") && c["model_type"].is_string() ? c["model_type"].get<std::string>() : "";
  return info;
}

detail::LayerSlice slice_of(const CheckpointInfo& info, int layer, const CheckpointSlice& slice) {
  if (!std::binary_search(info.moe_layers.begin(), info.moe_layers.end(), layer)) {
    std::string list;
    for (int l : info.moe_layers) list += (list.empty() ? "" : ",") + std::to_string(l);
    throw Error(fmt::format("checkpoint {}: layer {} has no routed experts (MoE layers: {})", info.dir, layer, list));
  }
  if (slice.tp < 1 || slice.tp_rank < 0 || slice.tp_rank >= slice.tp)
    throw Error(fmt::format("checkpoint slice: tp_rank must be in [0, tp) = [0, {}), got {}", slice.tp, slice.tp_rank));
  detail::LayerSlice s;
  s.local = checkpoint_model_config(info, slice).local();
  s.expert0 = s.local.expert_begin;
  s.i0 = static_cast<int64_t>(slice.tp_rank) * s.local.intermediate;
  s.fc2_bias = slice.tp_rank == 0;
  return s;
}

}  // namespace

namespace {

HostLayer load(const CheckpointFiles& files, const CheckpointInfo& info, int layer, const CheckpointSlice& slice) {
  const detail::LayerSlice s = slice_of(info, layer, slice);
  HostLayer L = info.format == CheckpointFormat::modelopt_nvfp4 ? detail::load_modelopt(files, info, layer, s)
                                                                : detail::load_gpt_oss(files, info, layer, s);
  try {
    L.validate();
  } catch (const Error& e) {
    throw Error(fmt::format("checkpoint {} layer {}: {}", info.dir, layer, e.what()));
  }
  return L;
}

}  // namespace

std::string checkpoint_format_name(CheckpointFormat f) {
  return f == CheckpointFormat::modelopt_nvfp4 ? "modelopt-nvfp4" : "gpt-oss-mxfp4";
}

CheckpointInfo inspect_checkpoint(const std::string& dir) { return inspect(CheckpointFiles(dir)); }

ModelConfig checkpoint_model_config(const CheckpointInfo& info, const CheckpointSlice& slice) {
  ModelConfig c;
  c.name = info.model_type.empty() ? "checkpoint" : info.model_type;
  c.global = info.global;
  c.global.precision = slice.precision;
  c.tp = slice.tp;
  c.ep = slice.ep;
  c.ep_rank = slice.ep_rank;
  try {
    (void)c.local();  // the slicing rules of docs/CONFIGS.md, with their messages
  } catch (const Error& e) {
    throw Error(fmt::format("checkpoint {}: {}", info.dir, e.what()));
  }
  return c;
}

HostLayer load_checkpoint_layer(const CheckpointInfo& info, int layer, const CheckpointSlice& slice) {
  return load(CheckpointFiles(info.dir), info, layer, slice);
}

HostLayer load_checkpoint_layer(const std::string& dir, int layer, const CheckpointSlice& slice) {
  const CheckpointFiles files(dir);
  return load(files, inspect(files), layer, slice);
}

}  // namespace moejit
