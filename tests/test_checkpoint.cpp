// Checkpoint loading (include/moejit/checkpoint.hpp) through the real file layouts: synthetic ModelOpt
// NVFP4 and gpt-oss MXFP4 checkpoints (tests/checkpoint_writer.hpp) load back into exactly the layers
// they were written from; distinct gate/up global scales load exactly and the CPU reference computes
// them; TP and EP slices sum to the unsliced layer's output; every broken file is named in the error.
#include "catch_compat.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <filesystem>
#include <string>
#include <vector>

#include "checkpoint_writer.hpp"
#include "layer_equal.hpp"
#include "moejit/checkpoint.hpp"
#include "moejit/codecs.hpp"
#include "moejit/error.hpp"
#include "moejit/host_layer.hpp"
#include "moejit/reference.hpp"
#include "moejit/safetensors.hpp"

using namespace moejit;
using Catch::Contains;
using moejit_test::check_same_layer;
using moejit_test::TempDir;
namespace fs = std::filesystem;

namespace {


// ModelOpt-like (nvfp4 silu, gate_up rows) or gpt-oss-like (mxfp4 swigluoai, interleaved rows, biases,
// limit 7): 4 experts, H = I = 64, top 2.
LayerSpec spec_of(ScaleFormat f) {
  const bool mx = f == ScaleFormat::mxfp4;
  LayerSpec s;
  s.format = f;
  s.activation = mx ? Activation::swigluoai : Activation::silu;
  s.gate_up_order = mx ? GateUpOrder::interleaved : GateUpOrder::gate_up;
  s.experts = 4;
  s.hidden = 64;
  s.intermediate = 64;
  s.top_k = 2;
  s.has_bias = mx;
  if (mx) s.limit = 7.0f;
  return s;
}
LayerSpec nvfp4_spec() { return spec_of(ScaleFormat::nvfp4); }

HostLayer gpt_oss_layer(uint64_t seed) {
  HostLayer L = make_random_layer(spec_of(ScaleFormat::mxfp4), seed);
  moejit_test::round_biases_to_bf16(L);
  return L;
}


// Sum over ranks of the unrounded reference outputs, against the unsliced layer's: equal up to the
// order of fp64 additions (TP splits the FC2 dot products, EP the top-k sum).
void check_slices_sum(const std::string& dir, int layer, const HostLayer& full, int tp, int ep) {
  const HostInputs in = make_random_inputs(full.spec, 9, 77);
  const ReferenceOutput want = reference_forward(full, in);
  std::vector<double> sum(want.out_f64.size(), 0.0);
  for (int t = 0; t < tp; ++t)
    for (int e = 0; e < ep; ++e) {
      const HostLayer part = load_checkpoint_layer(dir, layer, CheckpointSlice{tp, t, ep, e});
      CHECK(part.spec.intermediate == full.spec.intermediate / tp);
      CHECK(part.spec.experts == full.spec.experts / ep);
      CHECK(part.spec.expert_begin == e * full.spec.experts / ep);
      const ReferenceOutput got = reference_forward(part, in);
      for (size_t i = 0; i < sum.size(); ++i) sum[i] += got.out_f64[i];
    }
  double err = 0, norm = 0;
  for (size_t i = 0; i < sum.size(); ++i) {
    err = std::max(err, std::abs(sum[i] - want.out_f64[i]));
    norm = std::max(norm, std::abs(want.out_f64[i]));
  }
  INFO("tp " << tp << " ep " << ep << " max |sum - full| " << err << " of max |full| " << norm);
  CHECK(norm > 0);
  CHECK(err <= 1e-12 * norm);
}

std::string error_of(const std::function<void()>& fn) {
  try {
    fn();
  } catch (const Error& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST_CASE("checkpoint: ModelOpt NVFP4 loads back exactly (sharded, hf_quant_config.json or quantization_config)",
          "[checkpoint]") {
  TempDir tmp;
  const HostLayer l1 = make_random_layer(nvfp4_spec(), 1), l3 = make_random_layer(nvfp4_spec(), 3);
  for (bool hf : {true, false}) {
    for (int shards : {0, 1, 3}) {
      INFO("hf_quant_config " << hf << ", shards " << shards);
      const std::string dir = tmp.sub("modelopt-" + std::to_string(hf) + "-" + std::to_string(shards));
      moejit_test::write_modelopt_checkpoint(dir, {{1, l1}, {3, l3}}, hf, shards);
      const CheckpointInfo info = inspect_checkpoint(dir);
      CHECK(info.format == CheckpointFormat::modelopt_nvfp4);
      CHECK(info.model_type == "deepseek_v3");
      CHECK(info.tensor_prefix == "model.");
      CHECK(info.moe_layers == std::vector<int>{1, 3});
      CHECK(info.global.experts == 4);
      CHECK(info.global.intermediate == 64);
      check_same_layer(load_checkpoint_layer(dir, 1), l1);
      check_same_layer(load_checkpoint_layer(info, 3), l3);
      const ModelConfig c = checkpoint_model_config(info, {1, 0, 2, 1});
      CHECK(c.local().experts == 2);
      CHECK(c.local().expert_begin == 2);
    }
  }
}

TEST_CASE("checkpoint: gpt-oss MXFP4 loads back exactly (interleaved rows, BF16 biases, swigluoai)", "[checkpoint]") {
  TempDir tmp;
  const HostLayer l0 = gpt_oss_layer(5), l1 = gpt_oss_layer(6);
  const std::string dir = tmp.sub("gpt-oss");
  moejit_test::write_gpt_oss_checkpoint(dir, {{0, l0}, {1, l1}});
  const CheckpointInfo info = inspect_checkpoint(dir);
  CHECK(info.format == CheckpointFormat::gpt_oss_mxfp4);
  CHECK(info.moe_layers == std::vector<int>{0, 1});
  const HostLayer got = load_checkpoint_layer(dir, 1);
  check_same_layer(got, l1);
  CHECK(got.spec.activation == Activation::swigluoai);  // though config.json's hidden_act says silu
  CHECK(got.spec.swiglu_alpha == 1.702f);
  CHECK(got.spec.swiglu_beta == 1.0f);
  REQUIRE(got.spec.limit);
  CHECK(*got.spec.limit == 7.0f);
  // Row 2i is gate i and row 2i + 1 up i; byte j of a row holds element 2j in its low nibble.
  CHECK(got.fc1_weight(2, 6, 4) == l1.fc1_weight(2, fc1_row_of(l1.spec, false, 3), 4));
  CHECK(got.fc1_weight(2, 7, 5) == l1.fc1_weight(2, fc1_row_of(l1.spec, true, 3), 5));
  const uint8_t byte = got.w13[(2 * 128 + 7) * 32 + 2];
  CHECK(got.fc1_weight(2, 7, 4) == e2m1_to_float(byte & 0xF) * e8m0_to_float(got.w13_scale[(2 * 128 + 7) * 2]));
  CHECK(got.fc1_weight(2, 7, 5) == e2m1_to_float(byte >> 4) * e8m0_to_float(got.w13_scale[(2 * 128 + 7) * 2]));
}

TEST_CASE("checkpoint: gate and up with different weight_scale_2 load exactly as [E, 2]", "[checkpoint]") {
  TempDir tmp;
  HostLayer L = make_random_layer(nvfp4_spec(), 11);
  // Block scales in e4m3's normal range, so that doubling one is exact (+8 on the code: one binade).
  for (uint8_t& c : L.w13_scale) c = static_cast<uint8_t>(0x30 + (c & 0x0F));
  const std::vector<float> gs = L.w13_global_scale;
  HostLayer split = L;
  split.w13_global_scale.clear();
  for (int e = 0; e < 4; ++e) {
    split.w13_global_scale.push_back(gs[e]);                            // gate
    split.w13_global_scale.push_back(e == 2 ? gs[e] : gs[e] * 0.5f);  // up: half, except expert 2
  }
  const std::string dir = tmp.sub("split");
  moejit_test::write_modelopt_checkpoint(dir, {{1, split}});
  const HostLayer got = load_checkpoint_layer(dir, 1);
  REQUIRE(got.has_split_fc1_global_scale());
  check_same_layer(got, split);
  for (int e = 0; e < 4; ++e) {
    CHECK(got.fc1_global_scale(e, 5) == gs[e]);                                // a gate row
    CHECK(got.fc1_global_scale(e, 64 + 5) == (e == 2 ? gs[e] : gs[e] * 0.5f));  // an up row
  }

  // The same layer with up's halving folded into its block scales instead (one binade down: -8 on the
  // code) and one global scale per expert: the fp64 reference gives bit-identical outputs.
  HostLayer folded = L;
  for (int e = 0; e < 4; ++e)
    if (e != 2)
      for (int r = 64; r < 128; ++r)
        for (int b = 0; b < 4; ++b) folded.w13_scale[(e * 128 + r) * 4 + b] -= 8;
  const HostInputs in = make_random_inputs(L.spec, 16, 3);
  const ReferenceOutput a = reference_forward(got, in), b = reference_forward(folded, in);
  CHECK(a.out_f64 == b.out_f64);
  // Using the gate's scale for both (what a loader that keeps one FC1 scale would do) is a different layer.
  const ReferenceOutput gate_for_both = reference_forward(L, in);
  const std::vector<float> wrong(gate_for_both.out_f64.begin(), gate_for_both.out_f64.end());
  const Agreement off = compare(wrong, a.out_f64);
  INFO("gate's global scale for both: rel_l2 " << off.rel_l2);
  CHECK(off.rel_l2 > 0.1);

  // The layer file carries [E, 2] under the same name; the GPU kernels take it as it is.
  const std::string file = tmp.sub("split.safetensors");
  write_layer_file(file, got);
  CHECK(read_safetensors(file).tensors.at("w13_global_scale").shape == std::vector<int64_t>{4, 2});
  check_same_layer(read_layer_file(file), got);
  CHECK(kernel_fc1_global_scale(got) == got.w13_global_scale);

  // Equal gate and up scales load as one per expert, as before; the kernels take each expert's value as
  // its gate and its up scale.
  const std::string same = tmp.sub("same");
  moejit_test::write_modelopt_checkpoint(same, {{1, L}});
  CHECK(load_checkpoint_layer(same, 1).w13_global_scale == gs);
  HostLayer equal = L;
  equal.w13_global_scale.clear();
  for (float g : gs) equal.w13_global_scale.insert(equal.w13_global_scale.end(), {g, g});
  CHECK(kernel_fc1_global_scale(L) == equal.w13_global_scale);
  CHECK(kernel_fc1_global_scale(equal) == equal.w13_global_scale);
  CHECK(reference_forward(equal, in).out_f64 == reference_forward(L, in).out_f64);
}

TEST_CASE("checkpoint: a4 takes ModelOpt's input scales as the layer's global scales", "[checkpoint][precision]") {
  TempDir tmp;
  HostLayer L = make_random_layer(nvfp4_spec(), 12);
  L.spec.precision = ActPrecision::a4;
  L.a1_gs = {512.f, 1024.f, 256.f, 2048.f};  // powers of two: their reciprocals, and back, are exact
  L.a2_gs = {64.f, 128.f, 32.f, 16.f};
  const std::string dir = tmp.sub("a4");
  moejit_test::write_modelopt_checkpoint(dir, {{1, L}});
  CheckpointSlice a4;
  a4.precision = ActPrecision::a4;
  check_same_layer(load_checkpoint_layer(dir, 1, a4), L);
  // Other precisions leave them out (the layer is the same otherwise).
  CheckpointSlice a8;
  a8.precision = ActPrecision::a8;
  const HostLayer got8 = load_checkpoint_layer(dir, 1, a8);
  CHECK(got8.spec.precision == ActPrecision::a8);
  CHECK(got8.a1_gs.empty());
  CHECK(load_checkpoint_layer(dir, 1).spec.precision == ActPrecision::a16);
  // gpt-oss's MXFP4 checkpoints have no input scales: a4 is refused, naming why.
  moejit_test::write_gpt_oss_checkpoint(tmp.sub("mx"), {{0, gpt_oss_layer(13)}});
  CHECK_THROWS_WITH(load_checkpoint_layer(tmp.sub("mx"), 0, a4), Contains("has none"));
}

TEST_CASE("checkpoint: TP and EP slices sum to the unsliced layer", "[checkpoint]") {
  TempDir tmp;
  const HostLayer nv = make_random_layer(nvfp4_spec(), 21);
  const HostLayer mx = gpt_oss_layer(22);
  moejit_test::write_modelopt_checkpoint(tmp.sub("nv"), {{1, nv}});
  moejit_test::write_gpt_oss_checkpoint(tmp.sub("mx"), {{0, mx}});
  for (auto [tp, ep] : std::vector<std::pair<int, int>>{{2, 1}, {4, 1}, {1, 2}, {1, 4}, {2, 2}}) {
    if (64 / tp >= 16) check_slices_sum(tmp.sub("nv"), 1, nv, tp, ep);
    if (64 / tp >= 32) check_slices_sum(tmp.sub("mx"), 0, mx, tp, ep);
  }
  // The FC2 bias lives on TP rank 0 only.
  const HostLayer r1 = load_checkpoint_layer(tmp.sub("mx"), 0, {2, 1, 1, 0});
  for (float b : r1.w2_bias) CHECK(b == 0.0f);
  const HostLayer r0 = load_checkpoint_layer(tmp.sub("mx"), 0, {2, 0, 1, 0});
  CHECK(r0.w2_bias == mx.w2_bias);
}

TEST_CASE("checkpoint: errors name the file or tensor and the rule", "[checkpoint]") {
  TempDir tmp;
  const HostLayer nv = make_random_layer(nvfp4_spec(), 31);
  const HostLayer mx = gpt_oss_layer(32);
  int n = 0;
  auto modelopt = [&](const moejit_test::Mutator& m) {
    const std::string dir = tmp.sub("bad" + std::to_string(n++));
    moejit_test::write_modelopt_checkpoint(dir, {{1, nv}, {2, nv}}, true, 2, m);
    return dir;
  };
  auto load = [](const std::string& dir, int layer = 1, CheckpointSlice s = {}) {
    return error_of([&] { (void)load_checkpoint_layer(dir, layer, s); });
  };
  const std::string e1 = "model.layers.2.mlp.experts.1.";

  CHECK_THAT(load(modelopt([&](auto& t, auto&) { t.erase(e1 + "down_proj.weight_scale"); }), 2),
             Contains("'" + e1 + "down_proj.weight_scale' is missing"));
  CHECK_THAT(load(modelopt([&](auto& t, auto&) { t[e1 + "up_proj.weight_scale"].dtype = "U8"; }), 2),
             Contains("'" + e1 + "up_proj.weight_scale'") && Contains("has dtype U8, expected F8_E4M3") &&
                 Contains("model-0000"));
  CHECK_THAT(load(modelopt([&](auto& t, auto&) { t[e1 + "gate_proj.weight"].shape = {32, 64}; }), 2),
             Contains("has shape [32, 64], expected [64, 32]"));
  CHECK_THAT(load(modelopt([&](auto& t, auto&) { t[e1 + "gate_proj.weight_scale_2"] = moejit_test::scalar_f32(0.0f); }), 2),
             Contains("weight_scale_2' = 0 must be finite and > 0"));
  CHECK_THAT(load(modelopt([&](auto& t, auto&) { t.erase(e1 + "down_proj.input_scale"); }), 2),
             Contains("'" + e1 + "down_proj.input_scale' is missing"));
  CHECK_THAT(load(modelopt([&](auto& t, auto&) { t.erase("model.layers.2.mlp.experts.3.gate_proj.weight"); })),
             Contains("'model.layers.2.mlp.experts.3.gate_proj.weight' is missing") && Contains("4 routed experts"));
  CHECK_THAT(load(modelopt([](auto&, auto& c) { c.erase("moe_intermediate_size"); })),
             Contains("config.json has no field 'moe_intermediate_size'"));
  CHECK_THAT(load(modelopt([](auto&, auto& c) { c["n_routed_experts"] = 8; })),
             Contains("'model.layers.1.mlp.experts.4.gate_proj.weight' is missing"));
  CHECK_THAT(load(modelopt([](auto&, auto& c) { c["hidden_act"] = "tanh"; })), Contains("hidden_act 'tanh'"));
  CHECK_THAT(load(modelopt({}), 0), Contains("layer 0 has no routed experts (MoE layers: 1,2)"));
  CHECK_THAT(load(modelopt({}), 1, {3, 0, 1, 0}), Contains("intermediate = 64 is not divisible by tp = 3"));
  CHECK_THAT(load(modelopt({}), 1, {2, 2, 1, 0}), Contains("tp_rank must be in [0, tp) = [0, 2), got 2"));
  CHECK_THAT(load(modelopt({}), 1, {1, 0, 3, 0}), Contains("experts = 4 is not divisible by ep = 3"));
  CHECK_THAT(load(modelopt({}), 1, {1, 0, 2, 2}), Contains("ep_rank must be in [0, ep)"));

  // The announcement of the format.
  {
    const std::string dir = modelopt({});
    moejit_test::write_json(dir + "/hf_quant_config.json", {{"quantization", {{"quant_algo", "FP8"}}}});
    CHECK_THAT(load(dir), Contains("quant_algo is 'FP8', not NVFP4"));
    fs::remove(dir + "/hf_quant_config.json");
    CHECK_THAT(load(dir), Contains("neither hf_quant_config.json nor config.json's quantization_config"));
  }
  // Shards and the index.
  {
    const std::string dir = modelopt({});
    fs::remove(dir + "/model-00002-of-00002.safetensors");
    CHECK_THAT(load(dir), Contains("shard model-00002-of-00002.safetensors named by model.safetensors.index.json does "
                                   "not exist"));
    fs::remove(dir + "/model.safetensors.index.json");
    CHECK_THAT(load(dir), Contains("neither model.safetensors.index.json nor model.safetensors"));
    CHECK_THAT(load(tmp.sub("nonexistent")), Contains("not a directory"));
  }

  // gpt-oss.
  auto gpt = [&](const moejit_test::Mutator& m) {
    const std::string dir = tmp.sub("bad" + std::to_string(n++));
    moejit_test::write_gpt_oss_checkpoint(dir, {{0, mx}}, 2, m);
    return dir;
  };
  const std::string x = "model.layers.0.mlp.experts.";
  CHECK_THAT(load(gpt([&](auto& t, auto&) { t[x + "gate_up_proj_blocks"].shape = {4, 128, 32}; }), 0),
             Contains("'" + x + "gate_up_proj_blocks'") && Contains("expected [4, 128, 2, 16]"));
  CHECK_THAT(load(gpt([&](auto& t, auto&) { t[x + "down_proj_bias"].dtype = "U16"; }), 0),
             Contains("'" + x + "down_proj_bias'") && Contains("expected BF16"));
  CHECK_THAT(load(gpt([&](auto& t, auto&) { t.erase(x + "down_proj_scales"); }), 0),
             Contains("'" + x + "down_proj_scales' is missing"));
  CHECK_THAT(load(gpt([](auto&, auto& c) { c["swiglu_limit"] = -1; }), 0), Contains("swiglu_limit = -1 must be"));
  CHECK_THAT(load(gpt([](auto&, auto& c) { c["quantization_config"]["quant_method"] = "fp8"; }), 0),
             Contains("quant_method is 'fp8'"));
  CHECK_THAT(load(gpt({}), 0, {4, 0, 1, 0}), Contains("not a multiple of the mxfp4 scale block 32"));
}
