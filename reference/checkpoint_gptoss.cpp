// gpt-oss MXFP4 checkpoints: all experts of a layer in six tensors,
//   <prefix>layers.N.mlp.experts.gate_up_proj_blocks  U8   [E, 2I, H/32, 16]  e2m1, low nibble = even element
//   <prefix>layers.N.mlp.experts.gate_up_proj_scales  U8   [E, 2I, H/32]      e8m0
//   <prefix>layers.N.mlp.experts.gate_up_proj_bias    BF16 [E, 2I]
//   <prefix>layers.N.mlp.experts.down_proj_{blocks,scales,bias}  [E, H, I/32, 16], [E, H, I/32], [E, H]
// with gate and up interleaved by row (even rows gate, odd rows up). That is DESIGN §3's mxfp4 layer in
// the `interleaved` order byte for byte (blocks [.., H/32, 16] are [.., H/2] row-major), so the loader
// copies bytes and widens the biases from BF16 to F32 (exact). config.json's hidden_act says "silu",
// but the model computes swigluoai with α = 1.702, β = 1 and clamp limit swiglu_limit (7.0).
#include <fmt/format.h>

#include <cmath>
#include <cstring>

#include "moejit/codecs.hpp"
#include "moejit/error.hpp"
#include "reference/checkpoint_formats.hpp"

namespace moejit::detail {
namespace {

std::string tensor(const CheckpointInfo& info, int layer, const char* what) {
  return fmt::format("{}layers.{}.mlp.experts.{}", info.tensor_prefix, layer, what);
}

// Checks the six tensors of a layer against the global geometry.
void check_layer(const CheckpointFiles& f, const CheckpointInfo& info, int layer) {
  const int64_t E = info.global.experts, H = info.global.hidden, I = info.global.intermediate;
  const std::string geo = fmt::format("E {}, H {}, I {} by config.json", E, H, I);
  f.expect(tensor(info, layer, "gate_up_proj_blocks"), "U8", {E, 2 * I, H / 32, 16},
           "MXFP4 e2m1 pairs, gate and up rows interleaved; " + geo);
  f.expect(tensor(info, layer, "gate_up_proj_scales"), "U8", {E, 2 * I, H / 32}, "e8m0 per 32 inputs; " + geo);
  f.expect(tensor(info, layer, "gate_up_proj_bias"), "BF16", {E, 2 * I}, geo);
  f.expect(tensor(info, layer, "down_proj_blocks"), "U8", {E, H, I / 32, 16}, "MXFP4 e2m1 pairs; " + geo);
  f.expect(tensor(info, layer, "down_proj_scales"), "U8", {E, H, I / 32}, "e8m0 per 32 inputs; " + geo);
  f.expect(tensor(info, layer, "down_proj_bias"), "BF16", {E, H}, geo);
}

// BF16 [rows] from bytes -> F32, appended.
void append_bf16(std::vector<float>& dst, const std::vector<uint8_t>& src, int64_t first, int64_t count) {
  for (int64_t i = first; i < first + count; ++i) {
    uint16_t b = 0;
    std::memcpy(&b, src.data() + 2 * i, 2);
    dst.push_back(bf16_to_float(b));
  }
}

}  // namespace

CheckpointInfo inspect_gpt_oss(const CheckpointFiles& files) {
  CheckpointInfo info;
  info.format = CheckpointFormat::gpt_oss_mxfp4;
  static const std::regex pattern(R"((.*)layers\.(\d+)\.mlp\.experts\.gate_up_proj_blocks)");
  info.moe_layers = find_layers(files, pattern,
                                "'<prefix>layers.N.mlp.experts.gate_up_proj_blocks' (gpt-oss MXFP4 expert weights)",
                                &info.tensor_prefix);
  LayerSpec& s = info.global;
  s.format = ScaleFormat::mxfp4;
  s.activation = Activation::swigluoai;  // whatever hidden_act says (see above)
  s.gate_up_order = GateUpOrder::interleaved;
  s.swiglu_alpha = 1.702f;
  s.swiglu_beta = 1.0f;
  s.hidden = files.config_int({"hidden_size"}, 1);
  s.intermediate = files.config_int({"intermediate_size"}, 1);
  s.experts = files.config_int({"num_local_experts", "num_experts"}, 1);
  s.top_k = files.config_int({"num_experts_per_tok", "experts_per_token"}, 1);
  s.has_bias = true;
  if (files.config_has("swiglu_limit")) {
    const auto& v = files.config()["swiglu_limit"];
    if (!v.is_number() || !std::isfinite(v.get<double>()) || !(v.get<double>() > 0))
      throw Error(fmt::format("checkpoint {}: config.json swiglu_limit = {} must be a number > 0", files.dir(), v.dump()));
    s.limit = v.get<float>();
  }
  try {
    s.validate();
  } catch (const Error& e) {
    throw Error(fmt::format("checkpoint {}: config.json geometry: {}", files.dir(), e.what()));
  }
  check_layer(files, info, info.moe_layers.front());
  return info;
}

HostLayer load_gpt_oss(const CheckpointFiles& files, const CheckpointInfo& info, int layer, const LayerSlice& sl) {
  if (sl.local.precision == ActPrecision::a4)
    throw Error(fmt::format("checkpoint {}: a4 needs the activations' global input scales, and a gpt-oss MXFP4 "
                            "checkpoint has none (it runs in a16 or a8)",
                            info.dir));
  check_layer(files, info, layer);
  const int64_t H = info.global.hidden, I = info.global.intermediate;
  const int64_t El = sl.local.experts, Il = sl.local.intermediate, e0 = sl.expert0, i0 = sl.i0;
  HostLayer L;
  L.spec = sl.local;
  // Per expert: FC1 rows 2·i0 .. 2·(i0 + Il) (gate and up of the slice, still interleaved) are one
  // contiguous range; FC2 takes inputs [i0, i0 + Il) of every row. Reading expert by expert keeps
  // memory at one expert's tensors beyond the result.
  const int64_t fc1_row = H / 2, fc1_srow = H / 32, fc2_row = I / 2, fc2_srow = I / 32;
  for (int64_t e = e0; e < e0 + El; ++e) {
    const auto read_rows = [&](const char* name, int64_t row_bytes, int64_t rows_per_expert, int64_t row0, int64_t rows) {
      return files.read(tensor(info, layer, name), (e * rows_per_expert + row0) * row_bytes, rows * row_bytes);
    };
    const std::vector<uint8_t> w1 = read_rows("gate_up_proj_blocks", fc1_row, 2 * I, 2 * i0, 2 * Il);
    L.w13.insert(L.w13.end(), w1.begin(), w1.end());
    const std::vector<uint8_t> s1 = read_rows("gate_up_proj_scales", fc1_srow, 2 * I, 2 * i0, 2 * Il);
    L.w13_scale.insert(L.w13_scale.end(), s1.begin(), s1.end());
    append_bf16(L.w13_bias, read_rows("gate_up_proj_bias", 2, 2 * I, 2 * i0, 2 * Il), 0, 2 * Il);

    const std::vector<uint8_t> w2 = read_rows("down_proj_blocks", fc2_row, H, 0, H);
    append_block(L.w2, w2, fc2_row, 0, H, i0 / 2, Il / 2);
    const std::vector<uint8_t> s2 = read_rows("down_proj_scales", fc2_srow, H, 0, H);
    append_block(L.w2_scale, s2, fc2_srow, 0, H, i0 / 32, Il / 32);
    // The FC2 bias is added once: by TP rank 0, so that the ranks' partial outputs sum to the layer's.
    if (sl.fc2_bias)
      append_bf16(L.w2_bias, read_rows("down_proj_bias", 2, H, 0, H), 0, H);
    else
      L.w2_bias.insert(L.w2_bias.end(), H, 0.0f);
  }
  return L;
}

}  // namespace moejit::detail
