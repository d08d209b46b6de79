// GPU correctness of the prefill family against the fp64 CPU reference (DESIGN §8): every activation x
// format x bias x limit with the family forced, token counts from one pair per expert to many tiles per
// expert with ragged ends, K chunks and row groups cut short (H = 96, I = 160), skewed routing (half the
// pairs on one expert, experts with no pair, ids out of range), every tile shape giving the same bits, the
// golden layers, a real geometry, workspace offsets past 2^32 bytes, graph replay and run-to-run
// determinism. The family runs on sm_90a only; elsewhere the cases say so and stop.
#include "catch_compat.hpp"
#include <fmt/format.h>

#include <algorithm>
#include <cstdlib>
#include <initializer_list>
#include <utility>

#include "golden_dir.hpp"
#include "gpu_support.hpp"
#include "moejit/planner.hpp"
#include "moejit/safetensors.hpp"
#include "scoped_env.hpp"

using namespace moejit;
using namespace moejit::test;

namespace {
Runtime& runtime() { return tuned_runtime(); }

bool on_sm90() {
  if (runtime().arch() == Arch::sm_90a) return true;
  WARN("the prefill family needs sm_90a; skipped on " << to_string(runtime().arch()));
  return false;
}

std::vector<uint16_t> run_prefill(const PreparedLayer& layer, const HostInputs& in) {
  DeviceInputs d = upload_inputs(runtime(), layer, in, in.tokens);
  return run_poisoned(runtime(), layer, d, in.tokens, Family::prefill);
}

void check_every_variant(uint64_t seed, std::initializer_list<int> tokens, bool skewed) {
  for (LayerSpec spec : small_spec_variants()) {
    spec.experts = 5;
    HostLayer host = make_random_layer(spec, ++seed);
    auto layer = runtime().prepare(host);
    for (int m : tokens) {
      INFO(fmt::format("{} {} bias={} limit={} M={} skewed={} plan: {}", to_string(spec.format),
                       to_string(spec.activation), spec.has_bias, spec.limit.has_value(), m, skewed,
                       runtime().plan(*layer, m, Family::prefill).describe()));
      HostInputs in = make_random_inputs(spec, m, ++seed, true);
      if (skewed) skew_routing(spec, in);
      check_agreement(compare(to_float(run_prefill(*layer, in)), reference_forward(host, in).out_f64),
                      /*with_cosine=*/true);
    }
  }
}
}  // namespace

TEST_CASE("prefill family matches the reference for every activation, format, bias and limit", "[gpu][prefill]") {
  if (!on_sm90()) return;
  check_every_variant(9000, {1, 3, 17, 65, 127, 256}, false);
}

TEST_CASE("prefill family under skewed routing", "[gpu][prefill][skew]") {
  if (!on_sm90()) return;
  check_every_variant(9500, {65, 127, 256, 1000, 4096}, true);
}

TEST_CASE("every prefill tile matches the reference, and all give the same bits", "[gpu][prefill][tiles]") {
  if (!on_sm90()) return;
  // Each consumer warp sums its slab's full K in chunk order for every column, whatever the tile width
  // (and whether a tile runs on the full, the half- or the quarter-width MMAs), the ring depth, the
  // warpgroups, FC2's slabs per warp, whether two teams of warpgroups take the units in turn (g2) or
  // clusters of two CTAs share each B block (p2; FC2's 22 slabs make an odd count of row groups), and on
  // 160-token tiles (160 FC1 accumulators per thread; FC2 also on 128- and 96-wide products).
  const ScopedEnv guard{"MOEJIT_PREFILL_TILE_FC1", "MOEJIT_PREFILL_TILE_FC2"};
  uint64_t seed = 9900;
  for (ScaleFormat f : {ScaleFormat::nvfp4, ScaleFormat::mxfp4}) {
    LayerSpec spec = small_spec(f, f == ScaleFormat::mxfp4 ? Activation::swigluoai : Activation::silu, true, true);
    spec.experts = 4;
    spec.hidden = 352;        // 22 slabs: partial row groups; 5.5 chunks of K for FC1
    spec.intermediate = 480;  // 7.5 chunks of K for FC2
    HostLayer host = make_random_layer(spec, ++seed);
    auto layer = runtime().prepare(host);
    for (int m : {5, 77, 300}) {
      HostInputs in = make_random_inputs(spec, m, ++seed, true);
      const ReferenceOutput ref = reference_forward(host, in);
      std::vector<uint16_t> first;
      for (const auto& [tile1, tile2] : std::initializer_list<std::pair<const char*, const char*>>{
               {"w8n16d3", "w8n16d3s2"}, {"w8n16d3", "w8n16d3"}, {"w4n2d1", "w4n2d1s2"}, {"w8n4d2", "w8n4d2"},
               {"w12n8d2", "w12n8d2s2"}, {"w16n6d3", "w16n6d3"}, {"w4n16d1", "w4n16d1s2"}, {"w8n10d5", "w8n10d5s2"},
               {"w8n16d3g2", "w8n16d3g2"}, {"w8n8d2g2", "w8n8d4g2s2"}, {"w16n4d2g2", "w16n4d2g2"},
               {"w8n16d3p2", "w8n16d3p2"}, {"w8n8d2p2", "w8n8d4p2s2"}, {"w4n2d1p2", "w4n2d1p2s2"},
               {"w8n20d5", "w8n20d6"}, {"w4n20d2", "w4n20d3"}, {"w8n12d7", "w8n12d7"}}) {
        INFO(fmt::format("{} M={} tiles {} {}", to_string(f), m, tile1, tile2));
        ::setenv("MOEJIT_PREFILL_TILE_FC1", tile1, 1);
        ::setenv("MOEJIT_PREFILL_TILE_FC2", tile2, 1);
        const auto out = run_prefill(*layer, in);
        check_agreement(compare(to_float(out), ref.out_f64), /*with_cosine=*/true);
        if (first.empty())
          first = out;
        else
          CHECK(out == first);
      }
    }
  }
}

TEST_CASE("prefill family matches the golden layers", "[gpu][prefill][golden]") {
  if (!on_sm90()) return;
  for (const char* name : kGoldenLayers) {
    INFO(name);
    const std::string dir = golden_dir() + "/" + name;
    HostLayer host = read_layer_file(dir + "/layer.safetensors");
    HostInputs in = read_input_file(dir + "/input.safetensors");
    auto layer = runtime().prepare(host);
    check_agreement(compare(to_float(run_prefill(*layer, in)), golden_expected(dir)), /*with_cosine=*/false);
  }
}

TEST_CASE("prefill family at a real geometry", "[gpu][prefill][models]") {
  if (!on_sm90()) return;
  // gpt-oss-120b's matrices (MXFP4, swigluoai, biases, limit) on 4 local experts of 8: 45 chunks of K,
  // 22.5 row groups of 8 slabs, several tiles per expert with a ragged end.
  LayerSpec s = gptoss_120b_spec();
  s.experts = 4;
  s.expert_begin = 4;
  HostLayer host = make_random_code_layer(s, 78);
  auto layer = runtime().prepare(host);
  for (int m : {40, 150, 1000}) {
    INFO(fmt::format("M={} plan: {}", m, runtime().plan(*layer, m, Family::prefill).describe()));
    HostInputs in = make_random_inputs(s, m, 990 + m, true);
    skew_routing(s, in);
    check_agreement(compare(to_float(run_prefill(*layer, in)), reference_forward(host, in).out_f64),
                    /*with_cosine=*/true);
  }
}

TEST_CASE("prefill family with workspace offsets past 2^32 bytes", "[gpu][prefill][large]") {
  if (!on_sm90()) return;
  // 16384 tokens x 8 pairs x H = 8192: the layer input's blocks take 2.1 GB and the fp32 partial rows 4.3 GB,
  // so their byte offsets need 64 bits; skewed routing (half the tokens' first pair on one expert, experts
  // with no pair) makes one expert's tiles many. Every token's output depends on its own pairs only, so a
  // sample of tokens is checked against the reference run on those tokens alone.
  LayerSpec s = small_spec(ScaleFormat::nvfp4, Activation::silu, false, false);
  s.experts = 8;
  s.top_k = 8;
  s.expert_begin = 0;
  s.hidden = 8192;
  s.intermediate = 128;
  HostLayer host = make_random_layer(s, 4242);
  auto layer = runtime().prepare(host);
  const int m = 16384;
  HostInputs in = make_random_inputs(s, m, 4243, false);
  skew_routing(s, in);
  const std::vector<uint16_t> out = run_prefill(*layer, in);
  for (int token : {0, 1, 4095, 8191, 12000, m - 2, m - 1}) {
    INFO(fmt::format("token {}", token));
    HostInputs one;
    one.tokens = 1;
    one.top_k = s.top_k;
    one.hidden = s.hidden;
    one.x.assign(in.x.begin() + static_cast<size_t>(token) * s.hidden, in.x.begin() + static_cast<size_t>(token + 1) * s.hidden);
    one.topk_ids.assign(in.topk_ids.begin() + static_cast<size_t>(token) * s.top_k,
                        in.topk_ids.begin() + static_cast<size_t>(token + 1) * s.top_k);
    one.topk_weights.assign(in.topk_weights.begin() + static_cast<size_t>(token) * s.top_k,
                            in.topk_weights.begin() + static_cast<size_t>(token + 1) * s.top_k);
    const std::vector<uint16_t> row(out.begin() + static_cast<size_t>(token) * s.hidden,
                                    out.begin() + static_cast<size_t>(token + 1) * s.hidden);
    check_agreement(compare(to_float(row), reference_forward(host, one).out_f64), /*with_cosine=*/true);
  }
}

TEST_CASE("prefill family: graph replay equals eager execution and runs are bit-identical", "[gpu][prefill][graph]") {
  if (!on_sm90()) return;
  LayerSpec spec = small_spec(ScaleFormat::nvfp4, Activation::silu, true, false);
  spec.experts = 16;
  spec.top_k = 4;
  HostLayer host = make_random_layer(spec, 31);
  auto& rt = runtime();
  auto layer = rt.prepare(host);
  const int m = 1000;
  HostInputs in = make_random_inputs(spec, m, 32, true);
  skew_routing(spec, in);
  DeviceInputs d = upload_inputs(rt, *layer, in, m);
  rt.prewarm(*layer, m);
  auto eager1 = run_poisoned(rt, *layer, d, m, Family::prefill);
  auto eager2 = run_poisoned(rt, *layer, d, m, Family::prefill);
  CHECK(eager1 == eager2);
  check_agreement(compare(to_float(eager1), reference_forward(host, in).out_f64), /*with_cosine=*/true);

  check_graph_replays(rt, *layer, d, m, Family::prefill, eager1);
}
