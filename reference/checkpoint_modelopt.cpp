// ModelOpt NVFP4 checkpoints (DeepSeek-V3/R1, Qwen3-MoE, Kimi-K2 style): one set of tensors per expert
// and projection, `<prefix>layers.N.mlp.experts.j.{gate_proj,up_proj,down_proj}.{weight, weight_scale,
// weight_scale_2, input_scale}`. The weight is e2m1 (packed two per byte, the even element in the low
// nibble, [out, in/2] U8) · weight_scale (F8_E4M3 [out, in/16], linear row-major) · weight_scale_2
// (F32 scalar): exactly DESIGN §2's NVFP4 with weight_scale_2 as the global scale, so the bytes are
// copied as they are. gate and up become the w13 rows [0, I) and [I, 2I) (gate_up order).
#include <fmt/format.h>

#include <algorithm>

#include "moejit/error.hpp"
#include "reference/checkpoint_formats.hpp"

namespace moejit::detail {
namespace {

const char* kProj[] = {"gate_proj", "up_proj", "down_proj"};

std::string tensor(const CheckpointInfo& info, int layer, int64_t expert, const char* proj, const char* what) {
  return fmt::format("{}layers.{}.mlp.experts.{}.{}.{}", info.tensor_prefix, layer, expert, proj, what);
}

// Checks the four tensors of one projection of one expert (dtype, shape); `out` rows of `in` columns.
void check_projection(const CheckpointFiles& f, const CheckpointInfo& info, int layer, int64_t e, const char* proj,
                      int64_t out, int64_t in) {
  const std::string geometry = fmt::format("{} is [{}, {}] by config.json", proj, out, in);
  f.expect(tensor(info, layer, e, proj, "weight"), "U8", {out, in / 2}, "NVFP4 e2m1 packed two per byte; " + geometry);
  f.expect(tensor(info, layer, e, proj, "weight_scale"), "F8_E4M3", {out, in / 16},
           "one e4m3 scale per 16 inputs; " + geometry);
}

}  // namespace

CheckpointInfo inspect_modelopt(const CheckpointFiles& files) {
  CheckpointInfo info;
  info.format = CheckpointFormat::modelopt_nvfp4;
  static const std::regex pattern(R"((.*)layers\.(\d+)\.mlp\.experts\.\d+\.gate_proj\.weight)");
  info.moe_layers = find_layers(files, pattern,
                                "'<prefix>layers.N.mlp.experts.J.gate_proj.weight' (ModelOpt NVFP4 expert weights)",
                                &info.tensor_prefix);
  LayerSpec& s = info.global;
  s.format = ScaleFormat::nvfp4;
  s.activation = activation_from_hidden_act(files);
  s.gate_up_order = GateUpOrder::gate_up;
  s.hidden = files.config_int({"hidden_size"}, 1);
  s.intermediate = files.config_int({"moe_intermediate_size"}, 1);
  s.experts = files.config_int({"n_routed_experts", "num_experts", "num_local_experts"}, 1);
  s.top_k = files.config_int({"num_experts_per_tok"}, 1);
  s.has_bias = false;
  try {
    s.validate();
  } catch (const Error& e) {
    throw Error(fmt::format("checkpoint {}: config.json geometry: {}", files.dir(), e.what()));
  }
  // Every MoE layer has every expert (a missing one is named); the first layer's shapes are checked
  // here, each loaded layer's again when it is loaded.
  for (int layer : info.moe_layers)
    for (int64_t e = 0; e < s.experts; ++e)
      if (!files.find(tensor(info, layer, e, "gate_proj", "weight")))
        throw Error(fmt::format("checkpoint {}: tensor '{}' is missing (config.json gives {} routed experts)", files.dir(),
                                tensor(info, layer, e, "gate_proj", "weight"), s.experts));
  const int first = info.moe_layers.front();
  check_projection(files, info, first, 0, "gate_proj", s.intermediate, s.hidden);
  check_projection(files, info, first, 0, "up_proj", s.intermediate, s.hidden);
  check_projection(files, info, first, 0, "down_proj", s.hidden, s.intermediate);
  return info;
}

HostLayer load_modelopt(const CheckpointFiles& files, const CheckpointInfo& info, int layer, const LayerSlice& sl) {
  const LayerSpec& g = info.global;
  const int64_t H = g.hidden, I = g.intermediate, El = sl.local.experts, Il = sl.local.intermediate;
  HostLayer L;
  L.spec = sl.local;
  L.w13.reserve(El * 2 * Il * H / 2);
  L.w13_scale.reserve(El * 2 * Il * H / 16);
  L.w2.reserve(El * H * Il / 2);
  L.w2_scale.reserve(El * H * Il / 16);
  std::vector<float> gate_gs(El), up_gs(El);
  bool split = false;
  for (int64_t j = 0; j < El; ++j) {
    const int64_t e = sl.expert0 + j;
    float gs[3], in_scale[3];
    for (int p = 0; p < 3; ++p) {
      const bool fc2 = p == 2;
      check_projection(files, info, layer, e, kProj[p], fc2 ? H : I, fc2 ? I : H);
      gs[p] = files.positive_scalar(tensor(info, layer, e, kProj[p], "weight_scale_2"),
                                    "the projection's NVFP4 global scale");
      // The activation scale of NVFP4 inputs (W4A4): amax / (448 * 6), a divisor; the a4 kernels take its
      // reciprocal as their global scale. Read in every precision: a checkpoint without it is not the
      // layout this reader knows.
      in_scale[p] = files.positive_scalar(tensor(info, layer, e, kProj[p], "input_scale"), "the projection's input scale");
      const std::vector<uint8_t> w = files.read(tensor(info, layer, e, kProj[p], "weight"));
      const std::vector<uint8_t> sc = files.read(tensor(info, layer, e, kProj[p], "weight_scale"));
      if (!fc2) {  // rows [i0, i0 + Il) of gate or up, every input
        append_block(L.w13, w, H / 2, sl.i0, Il, 0, H / 2);
        append_block(L.w13_scale, sc, H / 16, sl.i0, Il, 0, H / 16);
      } else {  // every output row, inputs [i0, i0 + Il)
        append_block(L.w2, w, I / 2, 0, H, sl.i0 / 2, Il / 2);
        append_block(L.w2_scale, sc, I / 16, 0, H, sl.i0 / 16, Il / 16);
      }
    }
    gate_gs[j] = gs[0];
    up_gs[j] = gs[1];
    L.w2_global_scale.push_back(gs[2]);
    split = split || gs[0] != gs[1];
    if (sl.local.precision == ActPrecision::a4) {
      // gate and up quantize the same x: the larger input scale (the wider range) saturates neither.
      L.a1_gs.push_back(1.0f / std::max(in_scale[0], in_scale[1]));
      L.a2_gs.push_back(1.0f / in_scale[2]);
    }
  }
  // Equal gate and up global scales load as one per expert ([E]), as every layer did before;
  // different ones as [E, 2] (gate, up), exactly (docs/CHECKPOINTS.md).
  for (int64_t j = 0; j < El; ++j) {
    L.w13_global_scale.push_back(gate_gs[j]);
    if (split) L.w13_global_scale.push_back(up_gs[j]);
  }
  return L;
}

}  // namespace moejit::detail
