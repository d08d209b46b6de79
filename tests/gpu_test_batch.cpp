// GPU correctness of the batch family against the fp64 CPU reference (DESIGN §8): every activation x
// format x bias x limit with the family forced, token counts from one pair per expert to tiles of 64 with
// ragged ends, row groups and K chunks cut short (H = 96, I = 160), invalid expert ids, every tile shape
// giving the same bits, the golden layers, a real geometry, graph replay and run-to-run determinism.
#include "catch_compat.hpp"
#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

#include "golden_dir.hpp"
#include "gpu_support.hpp"
#include "moejit/planner.hpp"
#include "moejit/safetensors.hpp"

using namespace moejit;
using namespace moejit::test;

namespace {
// The planner overrides a case sets (ScopedEnv) pick the Runtime (gpu_support.hpp: tuned_runtime).
Runtime& runtime() { return tuned_runtime(); }

std::vector<uint16_t> run_batch(const PreparedLayer& layer, const HostInputs& in) {
  DeviceInputs d = upload_inputs(runtime(), layer, in, in.tokens);
  return run_poisoned(runtime(), layer, d, in.tokens, Family::batch);
}

// Every small layer variant (activation x format x bias x limit) at each token count, under whatever
// tile the planner (or its overrides) picks, against the fp64 reference. Seeds follow from `seed`.
void check_every_variant(uint64_t seed, std::initializer_list<int> tokens) {
  for (const LayerSpec& spec : small_spec_variants()) {
    HostLayer host = make_random_layer(spec, ++seed);
    auto layer = runtime().prepare(host);
    for (int m : tokens) {
      INFO(fmt::format("{} {} bias={} limit={} M={} plan: {}", to_string(spec.format), to_string(spec.activation),
                       spec.has_bias, spec.limit.has_value(), m, runtime().plan(*layer, m, Family::batch).describe()));
      HostInputs in = make_random_inputs(spec, m, ++seed, true);
      check_agreement(compare(to_float(run_batch(*layer, in)), reference_forward(host, in).out_f64), /*with_cosine=*/true);
    }
  }
}
}  // namespace

TEST_CASE("batch family matches the reference for every activation, format, bias and limit", "[gpu][batch]") {
  // 1 pair per expert up to several 64-pair tiles per expert with a ragged last tile.
  check_every_variant(5000, {1, 3, 17, 64, 130, 300});
}

TEST_CASE("every batch tile matches the reference, and tiles of one product give the same bits", "[gpu][batch][tiles]") {
  // Each warp sums its slabs' full K in chunk order for every column, so the tile's height (warps, slabs
  // per warp), its ring depth and its width within one chunk product (1-2 column tiles: block scales on the fp32 results;
  // 4-8: block scales on the weights, templates/moe_batch.cuh) change no bit.
  const ScopedEnv guard{"MOEJIT_BATCH_TILE_FC1", "MOEJIT_BATCH_TILE_FC2"};
  uint64_t seed = 6000;
  for (ScaleFormat f : {ScaleFormat::nvfp4, ScaleFormat::mxfp4}) {
    LayerSpec spec = small_spec(f, f == ScaleFormat::mxfp4 ? Activation::swigluoai : Activation::silu, true, true);
    spec.experts = 4;
    spec.hidden = 352;        // 22 slabs: partial row groups for 4 and 8 warps
    spec.intermediate = 480;  // 7.5 chunks of K for FC2
    HostLayer host = make_random_layer(spec, ++seed);
    auto layer = runtime().prepare(host);
    for (int m : {5, 77, 200}) {
      HostInputs in = make_random_inputs(spec, m, ++seed, true);
      const ReferenceOutput ref = reference_forward(host, in);
      // Per chunk product, the first tile's bits and the tiles that must reproduce them.
      for (const auto& group :
           {std::vector<const char*>{"w4n1d3", "w1n1d1", "w2n2d1", "w16n1d6", "w8n2d2o2", "w2n1d3s2", "w4n2d1s2"},
            std::vector<const char*>{"w4n8d3", "w4n4d1", "w8n8d2", "w1n4d7", "w4n8d5o2", "w4n8d3s2", "w2n4d2s2"},
            // Warpgroup MMA (sm_90a): 1..4 warpgroups, token tiles of 8 to 256 pairs, rings of 4..6 stages,
            // and the planned tiles (32, 48, 56 and 64 pairs at 2 CTAs per SM).
            std::vector<const char*>{"w8n16d3o1m1", "w4n4d3m1", "w8n32d3o1m1", "w12n8d4o1m1", "w16n1d4o1m1", "w4n24d5m1",
                                     "w8n4d3o2m1", "w8n6d3o2m1", "w8n7d3o2m1", "w8n8d3o2m1"}}) {
        if (group.front() == std::string("w8n16d3o1m1") && runtime().arch() != Arch::sm_90a) {
          WARN("warpgroup-MMA tiles need sm_90a; skipped on " << to_string(runtime().arch()));
          continue;
        }
        std::vector<uint16_t> first;
        for (const char* tile : group) {
          INFO(fmt::format("{} M={} tile {}", to_string(f), m, tile));
          ::setenv("MOEJIT_BATCH_TILE_FC1", tile, 1);
          ::setenv("MOEJIT_BATCH_TILE_FC2", tile, 1);
          const auto out = run_batch(*layer, in);
          check_agreement(compare(to_float(out), ref.out_f64), /*with_cosine=*/true);
          if (first.empty())
            first = out;
          else
            CHECK(out == first);
        }
      }
    }
  }
}

TEST_CASE("warpgroup-MMA batch kernels match the reference for every activation, format, bias and limit",
          "[gpu][batch][wgmma]") {
  if (runtime().arch() != Arch::sm_90a) {
    WARN("warpgroup MMA needs sm_90a; skipped on " << to_string(runtime().arch()));
    return;
  }
  const ScopedEnv guard{"MOEJIT_BATCH_TILE_FC1", "MOEJIT_BATCH_TILE_FC2"};
  ::setenv("MOEJIT_BATCH_TILE_FC1", "w8n8d3o1m1", 1);
  ::setenv("MOEJIT_BATCH_TILE_FC2", "w8n8d3o1m1", 1);
  check_every_variant(7000, {1, 17, 130, 300});
}

TEST_CASE("batch family matches the golden layers", "[gpu][batch][golden]") {
  for (const char* name : kGoldenLayers) {
    INFO(name);
    const std::string dir = golden_dir() + "/" + name;
    HostLayer host = read_layer_file(dir + "/layer.safetensors");
    HostInputs in = read_input_file(dir + "/input.safetensors");
    const std::vector<double> want = golden_expected(dir);
    auto layer = runtime().prepare(host);
    check_agreement(compare(to_float(run_batch(*layer, in)), want), /*with_cosine=*/false);
  }
}

TEST_CASE("batch family at a real geometry", "[gpu][batch][models]") {
  // gpt-oss-120b's matrices (MXFP4, swigluoai, biases, limit) on 4 local experts of 8: 45 chunks of K,
  // 180 row slabs, tiles of 64 pairs with a ragged end.
  LayerSpec s = gptoss_120b_spec();
  s.experts = 4;
  s.expert_begin = 4;
  HostLayer host = make_random_code_layer(s, 78);
  auto layer = runtime().prepare(host);
  auto check_tokens = [&](uint64_t seed_base) {
    for (int m : {40, 150}) {
      INFO(fmt::format("M={} plan: {}", m, runtime().plan(*layer, m, Family::batch).describe()));
      HostInputs in = make_random_inputs(s, m, seed_base + m, true);
      check_agreement(compare(to_float(run_batch(*layer, in)), reference_forward(host, in).out_f64),
                      /*with_cosine=*/true);
    }
  };
  check_tokens(950);
  if (runtime().arch() == Arch::sm_90a) {  // the same on warpgroup MMA: 22.5 row groups of 8 slabs
    const ScopedEnv guard{"MOEJIT_BATCH_TILE_FC1", "MOEJIT_BATCH_TILE_FC2"};
    ::setenv("MOEJIT_BATCH_TILE_FC1", "w8n16d3o1m1", 1);
    ::setenv("MOEJIT_BATCH_TILE_FC2", "w8n16d3o1m1", 1);
    check_tokens(960);
  }
}

TEST_CASE("batch family: graph replay equals eager execution and runs are bit-identical", "[gpu][batch][graph]") {
  LayerSpec spec = small_spec(ScaleFormat::nvfp4, Activation::silu, true, false);
  spec.experts = 16;
  spec.top_k = 4;
  HostLayer host = make_random_layer(spec, 31);
  auto& rt = runtime();
  auto layer = rt.prepare(host);
  const int m = 300;  // past the decode family's range: the automatic plan is the batch family
  REQUIRE(rt.plan(*layer, m).family == Family::batch);
  HostInputs in = make_random_inputs(spec, m, 32, true);
  DeviceInputs d = upload_inputs(rt, *layer, in, m);
  rt.prewarm(*layer, m);
  auto eager1 = run_poisoned(rt, *layer, d, m);
  auto eager2 = run_poisoned(rt, *layer, d, m);
  CHECK(eager1 == eager2);
  check_agreement(compare(to_float(eager1), reference_forward(host, in).out_f64), /*with_cosine=*/true);

  check_graph_replays(rt, *layer, d, m, Family::automatic, eager1);
}
