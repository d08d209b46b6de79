// GPU correctness of the a8 (MXFP8) and a4 (NVFP4) activation precisions in the decode, batch and prefill
// families against the fp64 reference in the same precision (DESIGN §1, docs/DECISIONS.md "Precision"):
// every format x activation x bias x limit with ids outside the local range (expert parallelism), several
// M per family (each forced; the batch family's register-fed and warpgroup-MMA tiles apart), skewed
// routing, short last scale blocks and odd slab counts, every warpgroup-MMA batch and prefill tile giving
// the same bits, the a8 decode FC1 kernels (two slab groups per CTA, or one in the cooperative kernel)
// giving the same bits over odd slab counts, real geometries, a4 scales calibrated as checkpoints calibrate
// them (scalar and per expert) and saturating on purpose, x quantized once per token and once per pair
// giving the same bits, staged and loaded x giving the same bits, and the
// tolerance telling a quantized kernel from an a16 one.
#include "catch_compat.hpp"
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "cli_process.hpp"
#include "gpu_support.hpp"
#include "moejit/planner.hpp"

using namespace moejit;
using namespace moejit::test;
using Catch::Contains;

namespace {
Runtime& runtime() { return tuned_runtime(); }

// x and the intermediate are quantized exactly as the reference quantizes them (x bit for bit: same bf16
// input, exact arithmetic, tests/test_act_quant_device.cpp); the intermediate is quantized from its fp32
// value where the reference has its fp64 value, so a value within fp32 rounding of a grid midpoint may
// land one code apart: one e2m1 step is up to a third of a block's largest value, and over I terms moves
// an output element by a few % of the output's rms. Hence a looser per-element bound than a16's; rel_l2
// stays far below what a missing quantization costs (a8 ~5 %, a4 ~16 % from a16; the last case checks it).
constexpr double kQuantRelL2 = 1e-2;
constexpr double kQuantElement = 1.0 / 8;
constexpr double kQuantCosine = 0.9999;

void check_quantized(const Agreement& ag) {
  CHECK(ag.nonfinite == 0);
  CHECK(ag.rel_l2 < kQuantRelL2);
  CHECK(ag.max_scaled < kQuantElement);
  CHECK(ag.cosine > kQuantCosine);
}

// The layer of `spec` in precision p: a4 with global scales calibrated over a batch of other tokens, one per
// expert when per_expert (scale_factor multiplies them: > 1 saturates blocks on purpose).
HostLayer quantized_layer(LayerSpec spec, ActPrecision p, uint64_t seed, bool per_expert = false,
                          float scale_factor = 1.f, bool code_layer = false) {
  spec.precision = ActPrecision::a16;
  HostLayer host = code_layer ? make_random_code_layer(spec, seed) : make_random_layer(spec, seed);
  if (p == ActPrecision::a4) {
    const int calib_tokens = spec.hidden * spec.intermediate > (1 << 22) ? 16 : 64;
    const ActivationScales s = calibrate_a4_scales(host, make_random_inputs(spec, calib_tokens, seed + 1, false), per_expert);
    host.a1_gs = per_expert ? s.a1_gs_per_expert : std::vector<float>{s.a1_gs};
    host.a2_gs = per_expert ? s.a2_gs_per_expert : std::vector<float>{s.a2_gs};
    for (float& v : host.a1_gs) v *= scale_factor;
    for (float& v : host.a2_gs) v *= scale_factor;
  }
  host.spec.precision = p;
  host.validate();
  return host;
}

ReferenceOutput reference_in_precision(const HostLayer& host, const HostInputs& in) {
  return reference_forward(host, in, host.spec.precision, layer_activation_scales(host));
}

std::vector<uint16_t> run_family(const PreparedLayer& layer, const HostInputs& in, Family f) {
  DeviceInputs d = upload_inputs(runtime(), layer, in, in.tokens);
  return run_poisoned(runtime(), layer, d, in.tokens, f);
}

struct FamilyTokens {
  Family family;
  std::vector<int> tokens;
};
// Decode: one token (staged x), a few pairs (inline routing, FC2-sum) and the route kernel's range; batch:
// one pair per expert to several 64-pair tiles with a ragged end.
const FamilyTokens kSmallTokens[] = {{Family::decode, {1, 2, 5, 16, 40}}, {Family::batch, {1, 17, 64, 130}}};

// The kernels that quantize with one slab per warp (a8's intermediate blocks span a warp pair,
// templates/slab_pair_max.cuh): the batch family's warpgroup-MMA tiles and the prefill family, both sm_90a
// only. A tile override (ScopedEnv) picks a batch tile; "" leaves the planner's.
struct WarpgroupKernels {
  Family family;
  const char* tile;
};
const WarpgroupKernels kWarpgroupKernels[] = {{Family::batch, "w8n8d3o1m1"}, {Family::prefill, ""}};

bool on_sm90() {
  if (runtime().arch() == Arch::sm_90a) return true;
  WARN("warpgroup MMA (batch tiles m, the prefill family) needs sm_90a; skipped on " << to_string(runtime().arch()));
  return false;
}

// Sets the override that forces `tile` on the family's FC1 and FC2 (none for "").
void force_tile(Family f, const char* tile) {
  const char* fc1 = f == Family::prefill ? "MOEJIT_PREFILL_TILE_FC1" : "MOEJIT_BATCH_TILE_FC1";
  const char* fc2 = f == Family::prefill ? "MOEJIT_PREFILL_TILE_FC2" : "MOEJIT_BATCH_TILE_FC2";
  if (*tile) {
    ::setenv(fc1, tile, 1);
    ::setenv(fc2, tile, 1);
  } else {
    ::unsetenv(fc1);
    ::unsetenv(fc2);
  }
}

using moejit_test::compile_plans;  // a case's kernels compiled in parallel processes before it runs them

// The keys of a plan that must be warpgroup-MMA ones: the batch tile m, or the prefill family.
void require_warpgroup_plan(const Plan& plan, Family f) {
  REQUIRE(plan.family == f);
  for (const KernelKey& k : plan.kernels)
    if (k.kind == KernelKind::batch_fc1 || k.kind == KernelKind::batch_fc2) REQUIRE(k.wgmma);
}
}  // namespace

TEST_CASE("a8 and a4 match the reference for every activation, format, bias and limit in both families",
          "[gpu][precision]") {
  uint64_t seed = 39000;
  for (ActPrecision p : {ActPrecision::a8, ActPrecision::a4})
    for (const LayerSpec& spec : small_spec_variants()) {
      // a4: scalar and per-expert scales in turn.
      const bool per_expert = p == ActPrecision::a4 && (seed & 1);
      const HostLayer host = quantized_layer(spec, p, ++seed, per_expert);
      auto layer = runtime().prepare(host);
      for (const FamilyTokens& ft : kSmallTokens)
        for (int m : ft.tokens) {
          INFO(fmt::format("{} {} {} bias={} limit={} per_expert={} M={} plan: {}", to_string(p), to_string(spec.format),
                           to_string(spec.activation), spec.has_bias, spec.limit.has_value(), per_expert, m,
                           runtime().plan(*layer, m, ft.family).describe()));
          const HostInputs in = make_random_inputs(spec, m, ++seed, true);
          check_quantized(compare(to_float(run_family(*layer, in, ft.family)), reference_in_precision(host, in).out_f64));
        }
    }
}

TEST_CASE("a8 and a4 with short last scale blocks and an odd slab count", "[gpu][precision][tails]") {
  // NVFP4 allows H and I multiples of 16: H = 80 leaves a8's last x block 16 long, I = 176 (11 slabs) its
  // last intermediate block one slab (the last a8 FC1 CTA's second slab group has no slab).
  uint64_t seed = 39500;
  for (ActPrecision p : {ActPrecision::a8, ActPrecision::a4}) {
    LayerSpec spec = small_spec(ScaleFormat::nvfp4, Activation::silu, true, true);
    spec.hidden = 80;
    spec.intermediate = 176;
    const HostLayer host = quantized_layer(spec, p, ++seed);
    auto layer = runtime().prepare(host);
    for (const FamilyTokens& ft : kSmallTokens)
      for (int m : ft.tokens) {
        INFO(fmt::format("{} M={} plan: {}", to_string(p), m, runtime().plan(*layer, m, ft.family).describe()));
        const HostInputs in = make_random_inputs(spec, m, ++seed, true);
        check_quantized(compare(to_float(run_family(*layer, in, ft.family)), reference_in_precision(host, in).out_f64));
      }
  }
}

TEST_CASE("a8 and a4 at real model geometries", "[gpu][precision][models]") {
  // The planner's tiles: gpt-oss-120b's batch M = 256 (8 pairs per expert) on the register-fed MMAs,
  // Qwen3-30B-A3B's (16 per expert) on a warpgroup-MMA tile; the prefill family forced on sm_90a.
  struct Case {
    const char* config;
    std::vector<int> decode_tokens, batch_tokens, prefill_tokens;
  };
  uint64_t seed = 39700;
  const bool sm90 = runtime().arch() == Arch::sm_90a;
  for (const Case& c : {Case{"gpt-oss-120b", {1, 7, 12, 64}, {256}, {256}}, Case{"deepseek-v3", {1, 9}, {64}, {}},
                        Case{"qwen3-30b-a3b", {1, 12, 48}, {256}, {256}}}) {
    const LayerSpec spec = load_model_config(c.config).local();
    for (ActPrecision p : {ActPrecision::a8, ActPrecision::a4}) {
      const HostLayer host = quantized_layer(spec, p, ++seed, /*per_expert=*/p == ActPrecision::a4, 1.f, /*code_layer=*/true);
      auto layer = runtime().prepare(host);
      for (const FamilyTokens& ft : {FamilyTokens{Family::decode, c.decode_tokens}, FamilyTokens{Family::batch, c.batch_tokens},
                                     FamilyTokens{Family::prefill, sm90 ? c.prefill_tokens : std::vector<int>{}}})
        for (int m : ft.tokens) {
          INFO(fmt::format("{} {} M={} plan: {}", c.config, to_string(p), m, runtime().plan(*layer, m, ft.family).describe()));
          const HostInputs in = make_random_inputs(spec, m, ++seed, true);
          check_quantized(compare(to_float(run_family(*layer, in, ft.family)), reference_in_precision(host, in).out_f64));
        }
    }
  }
}

TEST_CASE("a8 and a4 in the warpgroup-MMA batch tiles and the prefill family, every variant, skewed routing",
          "[gpu][precision][warpgroup]") {
  if (!on_sm90()) return;
  // One and several tiles per expert with ragged ends; skewed: half the first pairs on one expert (many
  // tiles, the persistent prefill CTAs walking several units each) and an expert without pairs.
  const ScopedEnv guard{"MOEJIT_BATCH_TILE_FC1", "MOEJIT_BATCH_TILE_FC2", "MOEJIT_PREFILL_TILE_FC1",
                        "MOEJIT_PREFILL_TILE_FC2"};
  uint64_t seed = 40000;
  for (const WarpgroupKernels& wk : kWarpgroupKernels)
    for (ActPrecision p : {ActPrecision::a8, ActPrecision::a4})
      for (LayerSpec spec : small_spec_variants()) {
        spec.experts = 5;
        const bool per_expert = p == ActPrecision::a4 && (seed & 1);
        const HostLayer host = quantized_layer(spec, p, ++seed, per_expert);
        auto layer = runtime().prepare(host);
        force_tile(wk.family, wk.tile);
        for (bool skewed : {false, true})
          for (int m : {65, 127, 256, 1000}) {
            if (!skewed && m == 1000) continue;
            const Plan plan = runtime().plan(*layer, m, wk.family);
            INFO(fmt::format("{} {} {} bias={} limit={} per_expert={} M={} skewed={} plan: {}", to_string(p),
                             to_string(spec.format), to_string(spec.activation), spec.has_bias, spec.limit.has_value(),
                             per_expert, m, skewed, plan.describe()));
            require_warpgroup_plan(plan, wk.family);
            HostInputs in = make_random_inputs(spec, m, ++seed, true);
            if (skewed) skew_routing(spec, in);
            check_quantized(compare(to_float(run_family(*layer, in, wk.family)), reference_in_precision(host, in).out_f64));
          }
      }
}

TEST_CASE("a8 and a4 in the prefill family's teams tiles (FC1 alone and both kernels), skewed routing",
          "[gpu][precision][warpgroup][teams]") {
  if (!on_sm90()) return;
  // The teams tiles (g2: the consumer warpgroups take alternate units, one's FC1 epilogue quantizing while
  // the other's products run): FC1 alone on teams as a8/a4 plan it at the 128-token tile (w8n16d7g2, FC2
  // as planned, perf-log v44), both kernels on teams, 16-wide n-tiles (the epilogue's shared a4 scales)
  // and 8-wide ones.
  const ScopedEnv guard{"MOEJIT_PREFILL_TILE_FC1", "MOEJIT_PREFILL_TILE_FC2"};
  const std::pair<const char*, const char*> tiles[] = {{"w8n16d7g2", nullptr}, {"w8n16d6g2", "w8n16d7g2"}, {"w8n8d3g2", "w8n8d3g2"}};
  const auto set_tiles = [](const std::pair<const char*, const char*>& t) {
    ::setenv("MOEJIT_PREFILL_TILE_FC1", t.first, 1);
    if (t.second)
      ::setenv("MOEJIT_PREFILL_TILE_FC2", t.second, 1);
    else
      ::unsetenv("MOEJIT_PREFILL_TILE_FC2");
  };
  struct Case {
    ActPrecision p;
    LayerSpec spec;
    bool per_expert;
    HostLayer host;
    std::shared_ptr<PreparedLayer> layer;
  };
  std::vector<Case> cases;
  uint64_t seed = 47000;
  for (ActPrecision p : {ActPrecision::a8, ActPrecision::a4})
    for (LayerSpec spec : small_spec_variants()) {
      spec.experts = 5;
      const bool per_expert = p == ActPrecision::a4 && (seed & 1);
      HostLayer host = quantized_layer(spec, p, ++seed, per_expert);
      auto layer = runtime().prepare(host);
      cases.push_back(Case{p, spec, per_expert, std::move(host), std::move(layer)});
    }
  std::vector<Plan> plans;
  for (const auto& t : tiles) {
    set_tiles(t);
    for (const Case& c : cases)
      for (int m : {127, 1000}) plans.push_back(runtime().plan(*c.layer, m, Family::prefill));
  }
  compile_plans(plans);
  for (const auto& t : tiles) {
    set_tiles(t);
    for (const Case& c : cases)
      for (int m : {127, 1000}) {
        const Plan plan = runtime().plan(*c.layer, m, Family::prefill);
        INFO(fmt::format("{} {} {} bias={} limit={} per_expert={} M={} plan: {}", to_string(c.p), to_string(c.spec.format),
                         to_string(c.spec.activation), c.spec.has_bias, c.spec.limit.has_value(), c.per_expert, m,
                         plan.describe()));
        REQUIRE(plan.kernels.at(2).kind == KernelKind::prefill_fc1);  // after the act_quant pre-pass and the route
        REQUIRE(plan.kernels.at(2).groups == 2);
        HostInputs in = make_random_inputs(c.spec, m, ++seed, true);
        if (m == 1000) skew_routing(c.spec, in);
        check_quantized(compare(to_float(run_family(*c.layer, in, Family::prefill)), reference_in_precision(c.host, in).out_f64));
      }
  }
}

TEST_CASE("a8 and a4 warpgroup-MMA tiles with K and I tails and odd slab counts give one result",
          "[gpu][precision][warpgroup][tiles]") {
  if (!on_sm90()) return;
  // H and I not multiples of 64 (FC1's and FC2's last K chunks short), I / 16 odd (11 and 23 slabs: the
  // last a8 block of the intermediate is one slab, its warp's partner lies past the matrix), H = 80 (a8's
  // last x block 16 long). Each tile sums every column's K in chunk order and quantizes the same fp32
  // values, so the tiles of a family (warpgroups, widths, half-width tiles, ring depths) give the same bits.
  const ScopedEnv guard{"MOEJIT_BATCH_TILE_FC1", "MOEJIT_BATCH_TILE_FC2", "MOEJIT_PREFILL_TILE_FC1",
                        "MOEJIT_PREFILL_TILE_FC2"};
  struct Geometry {
    ScaleFormat format;
    Activation activation;
    int hidden, intermediate;
  };
  const std::vector<const char*> batch_tiles = {"w8n8d3o1m1", "w4n4d3m1", "w8n32d3o1m1", "w12n8d4o1m1",
                                                "w16n1d4o1m1", "w8n6d3o2m1", "w4n24d5m1"};
  const std::vector<const char*> prefill_tiles = {"w8n16d3", "w4n2d1", "w8n4d2", "w12n8d2", "w16n6d3", "w4n16d1"};
  uint64_t seed = 40500;
  for (ActPrecision p : {ActPrecision::a8, ActPrecision::a4})
    for (const Geometry& g : {Geometry{ScaleFormat::nvfp4, Activation::silu, 80, 176},
                              Geometry{ScaleFormat::nvfp4, Activation::relu2, 352, 368},
                              Geometry{ScaleFormat::mxfp4, Activation::swigluoai, 352, 480}}) {
      LayerSpec spec = small_spec(g.format, g.activation, true, g.activation != Activation::relu2);
      spec.experts = 4;
      spec.hidden = g.hidden;
      spec.intermediate = g.intermediate;
      const HostLayer host = quantized_layer(spec, p, ++seed, /*per_expert=*/p == ActPrecision::a4);
      auto layer = runtime().prepare(host);
      std::vector<Plan> plans;
      for (int m : {5, 77, 300})
        for (const WarpgroupKernels& wk : kWarpgroupKernels)
          for (const char* tile : wk.family == Family::prefill ? prefill_tiles : batch_tiles) {
            force_tile(wk.family, tile);
            plans.push_back(runtime().plan(*layer, m, wk.family));
          }
      compile_plans(plans);
      for (int m : {5, 77, 300}) {
        HostInputs in = make_random_inputs(spec, m, ++seed, true);
        if (m == 300) skew_routing(spec, in);
        const ReferenceOutput ref = reference_in_precision(host, in);
        for (const WarpgroupKernels& wk : kWarpgroupKernels) {
          std::vector<uint16_t> first;
          for (const char* tile : wk.family == Family::prefill ? prefill_tiles : batch_tiles) {
            force_tile(wk.family, tile);
            const Plan plan = runtime().plan(*layer, m, wk.family);
            INFO(fmt::format("{} {} {} H={} I={} M={} plan: {}", to_string(p), to_string(g.format),
                             to_string(g.activation), g.hidden, g.intermediate, m, plan.describe()));
            require_warpgroup_plan(plan, wk.family);
            const auto out = run_family(*layer, in, wk.family);
            check_quantized(compare(to_float(out), ref.out_f64));
            if (first.empty())
              first = out;
            else
              CHECK(out == first);
          }
        }
      }
    }
}

TEST_CASE("a4 with saturating global scales matches the reference", "[gpu][precision][saturation]") {
  // Scales 8x the calibrated ones: a share of the blocks' scales saturate at 448 and their elements at
  // 6 x 448 / gs, in the kernels as in the reference.
  uint64_t seed = 39800;
  for (ScaleFormat f : {ScaleFormat::nvfp4, ScaleFormat::mxfp4}) {
    const LayerSpec spec = small_spec(f, Activation::swigluoai, true, true);
    const HostLayer host = quantized_layer(spec, ActPrecision::a4, ++seed, false, 8.f);
    auto layer = runtime().prepare(host);
    for (const FamilyTokens& ft : kSmallTokens)
      for (int m : ft.tokens) {
        INFO(fmt::format("{} M={}", to_string(f), m));
        const HostInputs in = make_random_inputs(spec, m, ++seed, true);
        check_quantized(compare(to_float(run_family(*layer, in, ft.family)), reference_in_precision(host, in).out_f64));
      }
  }
}

TEST_CASE("a4 quantizes x once per token or once per pair with the same bits", "[gpu][precision][per_token]") {
  // One a1_gs for every expert quantizes x once per token (the act_quant pre-pass's rows per token; the
  // prefill gather copies them); a1_gs per expert, once per routed pair (the pre-pass's rows per pair; the
  // prefill gather quantizes). The same layer with per-expert scales that equal the scalar one on every
  // expert the routing reaches (skew_routing leaves the last local expert without pairs, and its a1_gs is
  // doubled) takes the per-pair path and must give the per-token path's bits in every family.
  uint64_t seed = 52000;
  std::vector<std::pair<Family, int>> runs = {{Family::decode, 1}, {Family::decode, 5}, {Family::decode, 40},
                                              {Family::batch, 17}, {Family::batch, 130}};
  if (runtime().arch() == Arch::sm_90a) {
    runs.push_back({Family::prefill, 127});
    runs.push_back({Family::prefill, 1000});
  }
  struct Case {
    LayerSpec spec;
    HostLayer shared;
    std::shared_ptr<PreparedLayer> one, each;
  };
  std::vector<Case> cases;
  std::vector<Plan> plans;
  for (LayerSpec spec : small_spec_variants()) {
    spec.experts = 5;
    HostLayer shared = quantized_layer(spec, ActPrecision::a4, ++seed);
    REQUIRE(shared.a1_gs.size() == 1);
    HostLayer per_expert = shared;
    per_expert.a1_gs.assign(spec.experts, shared.a1_gs[0]);
    per_expert.a1_gs.back() *= 2.f;
    per_expert.a2_gs.assign(spec.experts, shared.a2_gs[0]);
    auto one = runtime().prepare(shared);
    auto each = runtime().prepare(per_expert);
    for (const auto& [family, m] : runs) plans.push_back(runtime().plan(*one, m, family));
    cases.push_back(Case{spec, std::move(shared), std::move(one), std::move(each)});
  }
  compile_plans(plans);
  for (const Case& c : cases)
    for (const auto& [family, m] : runs) {
      INFO(fmt::format("{} {} bias={} limit={} {} M={}", to_string(c.spec.format), to_string(c.spec.activation),
                       c.spec.has_bias, c.spec.limit.has_value(), to_string(family), m));
      HostInputs in = make_random_inputs(c.spec, m, ++seed, true);
      skew_routing(c.spec, in);
      const std::vector<uint16_t> per_token = run_family(*c.one, in, family);
      CHECK(run_family(*c.each, in, family) == per_token);
      // Against the reference, the whole-output bounds only: at M = 1000 on I = 160 with half the tokens on
      // one expert, an intermediate code one step apart (fp32 against fp64, "GPU test tolerance") can move
      // one output element past the per-element bound, and does on some seeds, in the per-pair path as in
      // this one (their bits are equal); the other cases hold that bound.
      const Agreement ag = compare(to_float(per_token), reference_in_precision(c.shared, in).out_f64);
      CHECK(ag.nonfinite == 0);
      CHECK(ag.rel_l2 < kQuantRelL2);
      CHECK(ag.cosine > kQuantCosine);
    }
}

// The plan's FC1 kernel (a8/a4 decode plans start with the act_quant pre-pass).
KernelKey fc1_key(const Plan& plan) {
  for (const KernelKey& k : plan.kernels)
    if (k.kind == KernelKind::decode_fc1) return k;
  FAIL("the plan has no decode_fc1 kernel: " << plan.describe());
  return {};
}

TEST_CASE("a8 and a4: a staged x row gives the bits of x quantized where it is loaded", "[gpu][precision][staged]") {
  // FC1 reads the pair's row the act_quant pre-pass quantized, staged or loaded per chunk, so the outputs
  // match bit for bit, as in a16.
  const ScopedEnv guard{"MOEJIT_DECODE_FC1", "MOEJIT_DECODE_TILE_FC1"};
  uint64_t seed = 39900;
  for (ActPrecision p : {ActPrecision::a8, ActPrecision::a4})
    for (ScaleFormat f : {ScaleFormat::nvfp4, ScaleFormat::mxfp4})
      for (int hidden : {352, 2880}) {
        LayerSpec spec = small_spec(f, Activation::silu, false, false);
        spec.experts = 8;
        spec.top_k = 4;
        spec.hidden = hidden;
        spec.intermediate = 480;
        const HostLayer host = quantized_layer(spec, p, ++seed);
        auto layer = runtime().prepare(host);
        ::setenv("MOEJIT_DECODE_FC1", "grid", 1);
        for (const char* tile : {"w4d1o8", "w4d1o6c4", "w2d2c4", "w1d1"}) {
          INFO(fmt::format("{} {} H={} tile {}", to_string(p), to_string(f), hidden, tile));
          const HostInputs in = make_random_inputs(spec, 1, ++seed, true);
          DeviceInputs d = upload_inputs(runtime(), *layer, in, 1);
          ::setenv("MOEJIT_DECODE_TILE_FC1", fmt::format("{}x0", tile).c_str(), 1);
          REQUIRE(!fc1_key(runtime().plan(*layer, 1, Family::decode)).x_staged);
          const auto loaded = run_poisoned(runtime(), *layer, d, 1, Family::decode);
          ::setenv("MOEJIT_DECODE_TILE_FC1", fmt::format("{}x1", tile).c_str(), 1);
          REQUIRE(fc1_key(runtime().plan(*layer, 1, Family::decode)).x_staged);
          const auto staged = run_poisoned(runtime(), *layer, d, 1, Family::decode);
          CHECK(staged == loaded);
          check_quantized(compare(to_float(staged), reference_in_precision(host, in).out_f64));
        }
      }
}

TEST_CASE("a8 and a4 decode launch structures and FC2 variants match the reference", "[gpu][precision][launch]") {
  // Two launches (pdl, plain), one cooperative launch (decode_fused: a8's odd-slab items idle in the
  // walk), the FC1 loop and FC2-sum.
  const ScopedEnv guard{"MOEJIT_DECODE_LAUNCH", "MOEJIT_DECODE_FC1", "MOEJIT_DECODE_FC2"};
  uint64_t seed = 39950;
  for (ActPrecision p : {ActPrecision::a8, ActPrecision::a4}) {
    LayerSpec spec = small_spec(ScaleFormat::mxfp4, Activation::swigluoai, true, true);
    spec.experts = 16;
    spec.top_k = 4;
    spec.hidden = 352;
    spec.intermediate = 480;
    const HostLayer host = quantized_layer(spec, p, ++seed);
    auto layer = runtime().prepare(host);
    for (int m : {1, 5, 16}) {
      const HostInputs in = make_random_inputs(spec, m, ++seed, true);
      const ReferenceOutput ref = reference_in_precision(host, in);
      for (const char* launch : {"pdl", "plain", "cooperative"})
        for (const char* fc1 : {"grid", "loop"})
          for (const char* fc2 : {"split", "sum"}) {
            if (std::string(launch) == "cooperative" && (std::string(fc1) != "grid" || std::string(fc2) != "split"))
              continue;  // the fused kernel has its own phases
            ::setenv("MOEJIT_DECODE_LAUNCH", launch, 1);
            ::setenv("MOEJIT_DECODE_FC1", fc1, 1);
            ::setenv("MOEJIT_DECODE_FC2", fc2, 1);
            INFO(fmt::format("{} M={} launch {} FC1 {} FC2 {} plan: {}", to_string(p), m, launch, fc1, fc2,
                             runtime().plan(*layer, m, Family::decode).describe()));
            check_quantized(compare(to_float(run_family(*layer, in, Family::decode)), ref.out_f64));
          }
    }
  }
}

TEST_CASE("a8 decode FC1 over odd slab counts: grid, loop and cooperative kernels give one result",
          "[gpu][precision][launch][pairs]") {
  // a8's decode_fc1 and decode_fc1_loop CTAs own a 32-row scale block of the intermediate in two slab
  // groups; with I / 16 odd (1 and 13 slabs) the last block's second group has no slab and only joins the
  // barriers. The cooperative kernel keeps one slab group (the even slab's item computes both slabs in
  // turn). Each sums a slab's K parts in the same order and quantizes the same fp32 values, so under one
  // tile for FC1 and FC2 (1 to 8 warps per group, 4 and 8 columns, x staged or loaded at one token) the
  // three give the same bits.
  const ScopedEnv guard{"MOEJIT_DECODE_LAUNCH", "MOEJIT_DECODE_FC1", "MOEJIT_DECODE_FC2", "MOEJIT_DECODE_TILE"};
  uint64_t seed = 41000;
  for (int intermediate : {16, 208}) {
    LayerSpec spec = small_spec(ScaleFormat::nvfp4, Activation::silu, true, true);
    spec.experts = 16;
    spec.top_k = 4;
    spec.hidden = 352;
    spec.intermediate = intermediate;
    const HostLayer host = quantized_layer(spec, ActPrecision::a8, ++seed);
    auto layer = runtime().prepare(host);
    for (int m : {1, 5, 16}) {
      const HostInputs in = make_random_inputs(spec, m, ++seed, true);
      DeviceInputs d = upload_inputs(runtime(), *layer, in, m);
      const ReferenceOutput ref = reference_in_precision(host, in);
      for (const char* tile : {"w1d1c8", "w2d2c4", "w4d1o3c8", "w8d1o2c4"}) {
        std::vector<uint16_t> first;
        for (const char* launch : {"pdl", "cooperative"})
          for (const char* fc1 : {"grid", "loop"}) {
            const bool cooperative = std::string(launch) == "cooperative";
            if (cooperative && std::string(fc1) == "loop") continue;
            ::setenv("MOEJIT_DECODE_LAUNCH", launch, 1);
            ::setenv("MOEJIT_DECODE_FC1", fc1, 1);
            ::setenv("MOEJIT_DECODE_FC2", "split", 1);
            ::setenv("MOEJIT_DECODE_TILE", tile, 1);
            const Plan plan = runtime().plan(*layer, m, Family::decode);
            INFO(fmt::format("I={} M={} tile {} launch {} FC1 {} plan: {}", intermediate, m, tile, launch, fc1,
                             plan.describe()));
            const auto fc1_key = std::find_if(plan.kernels.begin(), plan.kernels.end(), [](const KernelKey& k) {
              return k.kind == KernelKind::decode_fc1 || k.kind == KernelKind::decode_fc1_loop ||
                     k.kind == KernelKind::decode_fused;
            });
            REQUIRE(fc1_key != plan.kernels.end());
            CHECK(fc1_key->kind == (cooperative                  ? KernelKind::decode_fused
                                    : std::string(fc1) == "loop" ? KernelKind::decode_fc1_loop
                                                                 : KernelKind::decode_fc1));
            const auto out = run_poisoned(runtime(), *layer, d, m, Family::decode);
            check_quantized(compare(to_float(out), ref.out_f64));
            if (first.empty())
              first = out;
            else
              CHECK(out == first);
          }
      }
    }
  }
}

TEST_CASE("the a8/a4 tolerance tells a quantized kernel from an a16 one", "[gpu][precision][tolerance]") {
  // The same GPU output against the a16 reference must fail the quantized tolerance: a kernel that left x
  // or the intermediate in bf16 cannot pass.
  uint64_t seed = 39990;
  for (ActPrecision p : {ActPrecision::a8, ActPrecision::a4}) {
    const LayerSpec spec = small_spec(ScaleFormat::nvfp4, Activation::silu, false, false);
    const HostLayer host = quantized_layer(spec, p, ++seed);
    auto layer = runtime().prepare(host);
    for (const FamilyTokens& ft : kSmallTokens) {
      const HostInputs in = make_random_inputs(spec, 40, ++seed, false);
      const auto out = to_float(run_family(*layer, in, ft.family));
      INFO(fmt::format("{} {}", to_string(p), to_string(ft.family)));
      check_quantized(compare(out, reference_in_precision(host, in).out_f64));
      CHECK(compare(out, reference_forward(host, in, ActPrecision::a16).out_f64).rel_l2 > kQuantRelL2);
    }
    if (runtime().arch() != Arch::sm_90a) continue;
    const ScopedEnv guard{"MOEJIT_BATCH_TILE_FC1", "MOEJIT_BATCH_TILE_FC2", "MOEJIT_PREFILL_TILE_FC1",
                          "MOEJIT_PREFILL_TILE_FC2"};
    for (const WarpgroupKernels& wk : kWarpgroupKernels) {
      force_tile(wk.family, wk.tile);
      const HostInputs in = make_random_inputs(spec, 200, ++seed, false);
      require_warpgroup_plan(runtime().plan(*layer, in.tokens, wk.family), wk.family);
      const auto out = to_float(run_family(*layer, in, wk.family));
      INFO(fmt::format("{} {} tile {}", to_string(p), to_string(wk.family), wk.tile));
      check_quantized(compare(out, reference_in_precision(host, in).out_f64));
      CHECK(compare(out, reference_forward(host, in, ActPrecision::a16).out_f64).rel_l2 > kQuantRelL2);
    }
  }
}

TEST_CASE("an a4 layer without input scales is refused at prepare", "[gpu][precision][errors]") {
  LayerSpec spec = small_spec(ScaleFormat::nvfp4, Activation::silu, false, false);
  HostLayer host = make_random_layer(spec, 39999);
  host.spec.precision = ActPrecision::a4;
  CHECK_THROWS_WITH(runtime().prepare(host), Contains("a1_gs"));
  host.a1_gs = {1.f};
  host.a2_gs = {0.f};
  CHECK_THROWS_WITH(runtime().prepare(host), Contains("a2_gs[0] must be finite and > 0"));
  host.a2_gs = {1.f, 2.f};  // neither [1] nor [E]
  CHECK_THROWS_WITH(runtime().prepare(host), Contains("expected [1] or [E]"));
}
