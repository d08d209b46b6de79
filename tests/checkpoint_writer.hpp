#pragma once
// Writes small synthetic checkpoints in the real layouts the loader reads (include/moejit/checkpoint.hpp,
// docs/CHECKPOINTS.md): config.json, the quantization config, safetensors shards named as the Hugging
// Face hub names them and model.safetensors.index.json, with a few non-expert tensors beside the
// experts (embeddings, a dense layer, the router, DeepSeek's shared experts) so the loader has to pick
// its tensors out of a realistic mix. Tests load them through the real code path.
#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <stdexcept>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "moejit/host_layer.hpp"
#include "moejit/safetensors.hpp"

namespace moejit_test {

// A private scratch directory, removed with everything in it at scope exit.
struct TempDir {
  std::string path;
  TempDir() {
    std::string t = (std::filesystem::temp_directory_path() / "moejit-ckpt-XXXXXX").string();
    std::vector<char> buf(t.begin(), t.end());
    buf.push_back('\0');
    if (!mkdtemp(buf.data())) throw std::runtime_error("mkdtemp " + t + " failed");
    path = buf.data();
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string sub(const std::string& name) const { return path + "/" + name; }
};

using Tensors = std::map<std::string, moejit::Tensor>;
// Lets a test break a checkpoint before it is written (drop or change a tensor, edit config.json).
using Mutator = std::function<void(Tensors&, nlohmann::json& config)>;

inline moejit::Tensor make_tensor(const std::string& dtype, std::vector<int64_t> shape, const uint8_t* data,
                                  size_t bytes) {
  moejit::Tensor t;
  t.dtype = dtype;
  t.shape = std::move(shape);
  t.data.assign(data, data + bytes);
  return t;
}

inline moejit::Tensor scalar_f32(float v) {
  return make_tensor("F32", {}, reinterpret_cast<const uint8_t*>(&v), sizeof v);
}

inline moejit::Tensor bf16_zeros(std::vector<int64_t> shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<uint8_t> z(2 * n, 0);
  return make_tensor("BF16", std::move(shape), z.data(), z.size());
}

// Rows [row0, row0 + rows) of a row-major byte matrix of row_bytes per row.
inline moejit::Tensor rows_of(const std::string& dtype, const std::vector<uint8_t>& src, int64_t row_bytes, int64_t row0,
                              int64_t rows, std::vector<int64_t> shape) {
  return make_tensor(dtype, std::move(shape), src.data() + row0 * row_bytes, rows * row_bytes);
}

// Spreads the tensors over `shards` files (round robin in name order) and writes the index, as
// `save_pretrained` does; with shards == 0 writes a single model.safetensors and no index.
inline void write_shards(const std::string& dir, const Tensors& tensors, int shards) {
  namespace fs = std::filesystem;
  fs::create_directories(dir);
  if (shards == 0) {
    moejit::SafetensorsFile f;
    f.tensors = tensors;
    f.metadata["format"] = "pt";
    moejit::write_safetensors(dir + "/model.safetensors", f);
    return;
  }
  std::vector<moejit::SafetensorsFile> files(shards);
  nlohmann::json index = {{"metadata", {{"total_size", 0}}}, {"weight_map", nlohmann::json::object()}};
  int i = 0;
  size_t total = 0;
  char name[64];
  for (const auto& [tensor, t] : tensors) {
    const int s = i++ % shards;
    std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, shards);
    files[s].tensors[tensor] = t;
    index["weight_map"][tensor] = name;
    total += t.data.size();
  }
  index["metadata"]["total_size"] = total;
  for (int s = 0; s < shards; ++s) {
    std::snprintf(name, sizeof name, "model-%05d-of-%05d.safetensors", s + 1, shards);
    files[s].metadata["format"] = "pt";
    moejit::write_safetensors(dir + "/" + name, files[s]);
  }
  std::ofstream(dir + "/model.safetensors.index.json") << index.dump(2);
}

inline void write_json(const std::string& path, const nlohmann::json& j) { std::ofstream(path) << j.dump(2); }

// ModelOpt NVFP4, DeepSeek-V3 style: layer 0 dense, the given layers MoE (each an nvfp4 gate_up HostLayer
// of the same geometry, w13_global_scale [E] or [E, 2] giving gate's and up's weight_scale_2).
// hf_quant_config: announce NVFP4 in hf_quant_config.json (else config.json's quantization_config).
inline void write_modelopt_checkpoint(const std::string& dir, const std::map<int, moejit::HostLayer>& layers,
                                      bool hf_quant_config = true, int shards = 3, const Mutator& mutate = {}) {
  const moejit::LayerSpec& s = layers.begin()->second.spec;
  const int64_t E = s.experts, H = s.hidden, I = s.intermediate;
  Tensors t;
  t["model.embed_tokens.weight"] = bf16_zeros({8, H});
  t["model.layers.0.mlp.gate_proj.weight"] = bf16_zeros({2 * I, H});
  t["lm_head.weight"] = bf16_zeros({8, H});
  int last = 0;
  for (const auto& [n, L] : layers) {
    last = std::max(last, n);
    const std::string p = "model.layers." + std::to_string(n) + ".mlp.";
    t[p + "gate.weight"] = bf16_zeros({E, H});
    t[p + "shared_experts.gate_proj.weight"] = make_tensor("U8", {I, H / 2}, L.w13.data(), I * H / 2);
    const bool split = L.w13_global_scale.size() == static_cast<size_t>(2 * E);
    for (int64_t e = 0; e < E; ++e) {
      const std::string x = p + "experts." + std::to_string(e) + ".";
      for (int up = 0; up < 2; ++up) {
        const std::string proj = x + (up ? "up_proj." : "gate_proj.");
        const int64_t row0 = e * 2 * I + up * I;
        t[proj + "weight"] = rows_of("U8", L.w13, H / 2, row0, I, {I, H / 2});
        t[proj + "weight_scale"] = rows_of("F8_E4M3", L.w13_scale, H / 16, row0, I, {I, H / 16});
        t[proj + "weight_scale_2"] = scalar_f32(L.w13_global_scale[split ? 2 * e + up : e]);
        // An a4 layer's global scales are the reciprocals of the input scales (docs/CHECKPOINTS.md).
        t[proj + "input_scale"] = scalar_f32(L.a1_gs.empty() ? 0.0125f : 1.0f / L.a1_gs[L.a1_gs.size() == 1 ? 0 : e]);
      }
      t[x + "down_proj.weight"] = rows_of("U8", L.w2, I / 2, e * H, H, {H, I / 2});
      t[x + "down_proj.weight_scale"] = rows_of("F8_E4M3", L.w2_scale, I / 16, e * H, H, {H, I / 16});
      t[x + "down_proj.weight_scale_2"] = scalar_f32(L.w2_global_scale[e]);
      t[x + "down_proj.input_scale"] = scalar_f32(L.a2_gs.empty() ? 0.02f : 1.0f / L.a2_gs[L.a2_gs.size() == 1 ? 0 : e]);
    }
  }
  nlohmann::json quant = {{"quant_algo", "NVFP4"}, {"kv_cache_quant_algo", nullptr}, {"group_size", 16},
                          {"exclude_modules", {"lm_head"}}};
  nlohmann::json config = {{"architectures", {"DeepseekV3ForCausalLM"}},
                           {"model_type", "deepseek_v3"},
                           {"hidden_size", H},
                           {"moe_intermediate_size", I},
                           {"intermediate_size", 2 * I},
                           {"n_routed_experts", E},
                           {"n_shared_experts", 1},
                           {"num_experts_per_tok", s.top_k},
                           {"first_k_dense_replace", 1},
                           {"num_hidden_layers", last + 1},
                           {"hidden_act", "silu"},
                           {"torch_dtype", "bfloat16"}};
  if (!hf_quant_config) {
    nlohmann::json qc = quant;
    qc["quant_method"] = "modelopt";
    config["quantization_config"] = qc;
  }
  if (mutate) mutate(t, config);
  write_shards(dir, t, shards);
  write_json(dir + "/config.json", config);
  if (hf_quant_config)
    write_json(dir + "/hf_quant_config.json",
               {{"producer", {{"name", "modelopt"}, {"version", "0.29.0"}}}, {"quantization", quant}});
}

// gpt-oss MXFP4: every given layer MoE, each an mxfp4 swigluoai layer in interleaved order with biases
// that are exact in bf16 (the checkpoint stores them as BF16).
inline void write_gpt_oss_checkpoint(const std::string& dir, const std::map<int, moejit::HostLayer>& layers,
                                     int shards = 2, const Mutator& mutate = {}) {
  const moejit::LayerSpec& s = layers.begin()->second.spec;
  const int64_t E = s.experts, H = s.hidden, I = s.intermediate;
  auto bf16 = [](const std::vector<float>& v, std::vector<int64_t> shape) {
    std::vector<uint16_t> b(v.size());
    for (size_t i = 0; i < v.size(); ++i) {
      uint32_t u = 0;
      std::memcpy(&u, &v[i], 4);
      b[i] = static_cast<uint16_t>(u >> 16);  // the caller's values are exact in bf16
    }
    return make_tensor("BF16", std::move(shape), reinterpret_cast<const uint8_t*>(b.data()), 2 * b.size());
  };
  Tensors t;
  t["model.embed_tokens.weight"] = bf16_zeros({8, H});
  int last = 0;
  for (const auto& [n, L] : layers) {
    last = std::max(last, n);
    const std::string p = "model.layers." + std::to_string(n) + ".mlp.";
    t[p + "router.weight"] = bf16_zeros({E, H});
    t[p + "experts.gate_up_proj_blocks"] = make_tensor("U8", {E, 2 * I, H / 32, 16}, L.w13.data(), L.w13.size());
    t[p + "experts.gate_up_proj_scales"] = make_tensor("U8", {E, 2 * I, H / 32}, L.w13_scale.data(), L.w13_scale.size());
    t[p + "experts.gate_up_proj_bias"] = bf16(L.w13_bias, {E, 2 * I});
    t[p + "experts.down_proj_blocks"] = make_tensor("U8", {E, H, I / 32, 16}, L.w2.data(), L.w2.size());
    t[p + "experts.down_proj_scales"] = make_tensor("U8", {E, H, I / 32}, L.w2_scale.data(), L.w2_scale.size());
    t[p + "experts.down_proj_bias"] = bf16(L.w2_bias, {E, H});
  }
  nlohmann::json config = {{"architectures", {"GptOssForCausalLM"}},
                           {"model_type", "gpt_oss"},
                           {"hidden_size", H},
                           {"intermediate_size", I},
                           {"num_local_experts", E},
                           {"num_experts_per_tok", s.top_k},
                           {"num_hidden_layers", last + 1},
                           {"hidden_act", "silu"},
                           {"swiglu_limit", 7.0},
                           {"quantization_config", {{"quant_method", "mxfp4"}, {"modules_to_not_convert", {"router"}}}}};
  if (mutate) mutate(t, config);
  write_shards(dir, t, shards);
  write_json(dir + "/config.json", config);
}

// Rounds a layer's biases to bf16 values, as a gpt-oss checkpoint stores them.
inline void round_biases_to_bf16(moejit::HostLayer& L) {
  for (auto* v : {&L.w13_bias, &L.w2_bias})
    for (float& x : *v) {
      uint32_t u = 0;
      std::memcpy(&u, &x, 4);
      u = (u + 0x7FFF + ((u >> 16) & 1)) & 0xFFFF0000u;  // round to nearest even
      std::memcpy(&x, &u, 4);
    }
}

}  // namespace moejit_test
