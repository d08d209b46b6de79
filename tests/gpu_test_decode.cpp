// GPU correctness of the decode family against the fp64 CPU reference (DESIGN §8): every
// activation x format x bias x limit, M in {1, 2, 3, 7, 16, 33, 64}, fresh random data, poisoned
// outputs, invalid expert ids, real model geometries, every FC1 x FC2 variant for few pairs, graph
// replay and run-to-run determinism.
#include "catch_compat.hpp"
#include <fmt/format.h>

#include <cstdlib>
#include <cstring>

#include "golden_dir.hpp"
#include "gpu_support.hpp"
#include "moejit/error.hpp"
#include "moejit/planner.hpp"
#include "moejit/safetensors.hpp"
#include "runtime/driver_api.hpp"
#include "runtime/graph_capture.hpp"

using namespace moejit;
using namespace moejit::test;

namespace {
// The planner overrides a case sets (ScopedEnv) pick the Runtime (gpu_support.hpp: tuned_runtime).
Runtime& runtime() { return tuned_runtime(); }

// This suite tests the decode family: every forward forces it (the planner hands many pairs per expert to
// the batch family, gpu_test_batch.cpp).
std::vector<uint16_t> run_decode(Runtime& rt, const PreparedLayer& layer, DeviceInputs& d, int tokens) {
  return run_poisoned(rt, layer, d, tokens, Family::decode);
}

// A layer of the given geometry with the activation the format's models use: MXFP4 as gpt-oss
// (swigluoai, biases, limit, interleaved gate/up), NVFP4 silu without either.
LayerSpec format_spec(ScaleFormat f, int experts, int top_k, int hidden, int intermediate) {
  const bool oai = f == ScaleFormat::mxfp4;
  LayerSpec s = small_spec(f, oai ? Activation::swigluoai : Activation::silu, oai, oai);
  s.experts = experts;
  s.top_k = top_k;
  s.hidden = hidden;
  s.intermediate = intermediate;
  return s;
}

Agreement check_against_reference(const HostLayer& host, const PreparedLayer& layer, int tokens, uint64_t seed,
                                   bool invalid_ids = true) {
  auto& rt = runtime();
  HostInputs in = make_random_inputs(host.spec, tokens, seed, invalid_ids);
  DeviceInputs d = upload_inputs(rt, layer, in, tokens);
  auto out = run_decode(rt, layer, d, tokens);
  ReferenceOutput ref = reference_forward(host, in);
  return compare(to_float(out), ref.out_f64);
}

// The FC2-sum variant tests' cases: per scale format a random layer of 8 experts, top 4, H = 352 (22
// slabs) and I = 480 (a half chunk at the end of K), FC1's grid kernel and FC2-sum forced; per token
// count and FC2 tile fresh inputs (from 5 tokens on, token 1's slots 0-1 both route to local expert
// 3), uploaded. body(host, layer, inputs, device inputs, tokens, tile) runs inside the case's INFO.
template <typename Body>
void for_each_fc2_sum_case(uint64_t seed, std::initializer_list<int> token_counts,
                           std::initializer_list<const char*> tiles, Body body) {
  const ScopedEnv guard{"MOEJIT_DECODE_FC1", "MOEJIT_DECODE_FC2", "MOEJIT_DECODE_TILE_FC2"};
  for (ScaleFormat f : {ScaleFormat::nvfp4, ScaleFormat::mxfp4}) {
    LayerSpec spec = format_spec(f, 8, 4, 352, 480);
    HostLayer host = make_random_layer(spec, ++seed);
    auto layer = runtime().prepare(host);
    ::setenv("MOEJIT_DECODE_FC1", "grid", 1);
    ::setenv("MOEJIT_DECODE_FC2", "sum", 1);
    for (int m : token_counts)
      for (const char* tile : tiles) {
        INFO(fmt::format("{} M={} FC2 tile {}", to_string(f), m, tile));
        HostInputs in = make_random_inputs(spec, m, ++seed, true);
        if (m >= 5) in.topk_ids[4] = spec.expert_begin + 3, in.topk_ids[5] = spec.expert_begin + 3;
        DeviceInputs d = upload_inputs(runtime(), *layer, in, m);
        body(host, *layer, in, d, m, tile);
      }
  }
}
}  // namespace

TEST_CASE("decode family matches the reference for every activation, format, bias and limit", "[gpu][decode]") {
  uint64_t seed = 1000;
  for (const LayerSpec& spec : small_spec_variants()) {
    HostLayer host = make_random_layer(spec, ++seed);
    auto layer = runtime().prepare(host);
    for (int m : {1, 2, 3, 7, 16, 33, 64}) {
      INFO(fmt::format("{} {} bias={} limit={} M={}", to_string(spec.format), to_string(spec.activation), spec.has_bias,
                       spec.limit.has_value(), m));
      check_agreement(check_against_reference(host, *layer, m, ++seed), /*with_cosine=*/true);
    }
  }
}

TEST_CASE("decode family matches the golden layers", "[gpu][golden]") {
  for (const char* name : kGoldenLayers) {
    INFO(name);
    const std::string dir = golden_dir() + "/" + name;
    HostLayer host = read_layer_file(dir + "/layer.safetensors");
    HostInputs in = read_input_file(dir + "/input.safetensors");
    const std::vector<double> want = golden_expected(dir);
    auto layer = runtime().prepare(host);
    DeviceInputs d = upload_inputs(runtime(), *layer, in, in.tokens);
    auto out = run_decode(runtime(), *layer, d, in.tokens);
    check_agreement(compare(to_float(out), want), /*with_cosine=*/false);
  }
}

TEST_CASE("decode family at real model geometries", "[gpu][models]") {
  struct Case {
    const char* name;
    LayerSpec spec;
    std::vector<int> tokens;
  };
  const LayerSpec gptoss = gptoss_120b_spec();
  LayerSpec deepseek;
  deepseek.format = ScaleFormat::nvfp4;
  deepseek.activation = Activation::silu;
  deepseek.experts = 256;
  deepseek.hidden = 7168;
  deepseek.intermediate = 2048;
  deepseek.top_k = 8;
  LayerSpec qwen3 = deepseek;  // Qwen3-30B-A3B; M = 12 routes 96 pairs inline, M = 48 behind the route kernel
  qwen3.experts = 128;
  qwen3.hidden = 2048;
  qwen3.intermediate = 768;
  // gpt-oss M = 12: the 8-column FC1 loop; DeepSeek M = 9: 72 pairs inline (i2)
  for (const Case& c : {Case{"gpt-oss-120b", gptoss, {1, 7, 12, 64}}, Case{"deepseek-v3", deepseek, {1, 9}},
                        Case{"qwen3-30b-a3b", qwen3, {1, 12, 48}}}) {
    HostLayer host = make_random_code_layer(c.spec, 77);
    auto layer = runtime().prepare(host);
    for (int m : c.tokens) {
      INFO(fmt::format("{} M={}", c.name, m));
      check_agreement(check_against_reference(host, *layer, m, 900 + m), /*with_cosine=*/true);
    }
  }
}

TEST_CASE("every FC1 x FC2 variant for few pairs matches the reference", "[gpu][variants]") {
  // The planner picks decode_fc1, decode_fc1_loop or decode_fc1_stream, and decode_fc2 or
  // decode_fc2_sum, from the geometry; MOEJIT_DECODE_FC1 / _FC2 force each combination here. I = 2048 gives 128 FC1 slabs per
  // expert, so at M = 4 and 16 the loop's one wave walks several items per CTA.
  const ScopedEnv guard{"MOEJIT_DECODE_FC1", "MOEJIT_DECODE_FC2"};
  uint64_t seed = 5000;
  for (ScaleFormat f : {ScaleFormat::nvfp4, ScaleFormat::mxfp4}) {
    LayerSpec spec = format_spec(f, 16, 4, 256, 2048);
    HostLayer host = make_random_layer(spec, ++seed);
    auto layer = runtime().prepare(host);
    for (const char* fc1 : {"grid", "loop", "stream"})
      for (const char* fc2 : {"split", "sum"}) {
        ::setenv("MOEJIT_DECODE_FC1", fc1, 1);
        ::setenv("MOEJIT_DECODE_FC2", fc2, 1);
        for (int m : {1, 4, 16, 24}) {  // M = 24: 96 pairs, routed inline four per lane (i2)
          INFO(fmt::format("{} FC1 {} FC2 {} M={}", to_string(f), fc1, fc2, m));
          check_agreement(check_against_reference(host, *layer, m, ++seed), /*with_cosine=*/true);
        }
      }
  }
}

TEST_CASE("every decode launch structure matches the reference", "[gpu][launch]") {
  // MOEJIT_DECODE_LAUNCH: FC1 then FC2 as its programmatic dependent (pdl, the default), as two plain
  // launches (the same kernels, so the same bits), or one cooperative launch with a grid barrier
  // (decode_fused: FC1's tile for both phases on a grid clamped to co-resident CTAs, correct for any grid
  // size). Token counts from one pair to the route kernel's range (M = 33 and 64 at top-4), a token whose
  // two slots route to the same expert; then a gpt-oss-sized slab count, where the clamped grid walks
  // several items per CTA in both phases.
  const ScopedEnv guard{"MOEJIT_DECODE_LAUNCH"};
  struct Case {
    ScaleFormat format;
    int experts, hidden, intermediate;
    std::vector<int> tokens;
  };
  const Case cases[] = {{ScaleFormat::nvfp4, 16, 352, 480, {1, 2, 5, 16, 33, 64}},
                        {ScaleFormat::mxfp4, 16, 352, 480, {1, 2, 5, 16, 33, 64}},
                        {ScaleFormat::mxfp4, 8, 2880, 2880, {1, 4, 9}}};
  uint64_t seed = 9600;
  for (const Case& c : cases) {
    LayerSpec spec = format_spec(c.format, c.experts, 4, c.hidden, c.intermediate);
    HostLayer host = make_random_layer(spec, ++seed);
    auto layer = runtime().prepare(host);
    for (int m : c.tokens) {
      HostInputs in = make_random_inputs(spec, m, ++seed, true);
      if (m >= 2) in.topk_ids[4] = spec.expert_begin + 3, in.topk_ids[5] = spec.expert_begin + 3;
      DeviceInputs d = upload_inputs(runtime(), *layer, in, m);
      const ReferenceOutput ref = reference_forward(host, in);
      std::vector<uint16_t> pdl_out;
      for (const char* launch : {"pdl", "plain", "cooperative"}) {
        INFO(fmt::format("{} H={} I={} M={} launch {}", to_string(c.format), c.hidden, c.intermediate, m, launch));
        ::setenv("MOEJIT_DECODE_LAUNCH", launch, 1);
        REQUIRE(to_string(runtime().plan(*layer, m, Family::decode).launch) == launch);
        const auto out = run_decode(runtime(), *layer, d, m);
        check_agreement(compare(to_float(out), ref.out_f64), /*with_cosine=*/true);
        if (std::string(launch) == "pdl") pdl_out = out;
        if (std::string(launch) == "plain") CHECK(out == pdl_out);
        if (std::string(launch) == "cooperative") CHECK(run_decode(runtime(), *layer, d, m) == out);
      }
    }
  }
}

TEST_CASE("decode family up to its token limit", "[gpu][decode][limit]") {
  // The planner hands these token counts to the batch family by default, but decode serves up to
  // kDecodeMaxTokens (forced here): passes over many pairs per slab, the route kernel's lists, the split
  // FC2 with its combine. One more token is refused, not served wrongly.
  uint64_t seed = 9700;
  for (ScaleFormat f : {ScaleFormat::nvfp4, ScaleFormat::mxfp4}) {
    LayerSpec spec = format_spec(f, 16, 4, 352, 480);
    HostLayer host = make_random_layer(spec, ++seed);
    auto layer = runtime().prepare(host);
    for (int m : {65, 128, 191, kDecodeMaxTokens}) {
      INFO(fmt::format("{} M={} plan: {}", to_string(f), m, runtime().plan(*layer, m, Family::decode).describe()));
      check_agreement(check_against_reference(host, *layer, m, ++seed), /*with_cosine=*/true);
    }
    HostInputs in = make_random_inputs(spec, kDecodeMaxTokens + 1, ++seed, true);
    DeviceInputs d = upload_inputs(runtime(), *layer, in, kDecodeMaxTokens + 1);
    CHECK_THROWS_WITH(run_decode(runtime(), *layer, d, kDecodeMaxTokens + 1), Catch::Contains("at most"));
  }
}

namespace {
// A field of the plan's FC1 and FC2 kernels (the route kernel, where planned, left out), in launch order:
// what a same-bits test must confirm on both sides of its comparison, or it compares a kernel with itself.
template <class Field>
std::vector<int> decode_field_of(const Plan& plan, Field field) {
  std::vector<int> v;
  for (const KernelKey& k : plan.kernels)
    if (k.kind != KernelKind::route) v.push_back(field(k));
  return v;
}
std::vector<int> decode_columns_of(const Plan& plan) {
  return decode_field_of(plan, [](const KernelKey& k) { return k.columns; });
}
std::vector<int> decode_l2_ahead_of(const Plan& plan) {
  return decode_field_of(plan, [](const KernelKey& k) { return k.l2_ahead; });
}
}  // namespace

TEST_CASE("pairs in even MMA columns only give the same bits as pairs in every column", "[gpu][variants][columns]") {
  // columns = 4 moves pair t from column t to column 2t of its n-tile and skips the odd columns'
  // block-scale FMAs; every column's sums are independent, so outputs must not change. The planner
  // picks 4 at M <= 4 (FC2-sum up to M = 8); M = 9 and 16 force it where experts hold more than 4
  // pairs (several passes per slab), on every FC1 and FC2 variant.
  const ScopedEnv guard{"MOEJIT_DECODE_FC1", "MOEJIT_DECODE_FC2", "MOEJIT_DECODE_COLUMNS"};
  uint64_t seed = 8000;
  for (ScaleFormat f : {ScaleFormat::nvfp4, ScaleFormat::mxfp4}) {
    LayerSpec spec = format_spec(f, 8, 4, 320, 512);
    HostLayer host = make_random_layer(spec, ++seed);
    auto layer = runtime().prepare(host);
    for (const char* fc1 : {"grid", "loop", "stream"})
      for (const char* fc2 : {"split", "sum"})
        for (int m : {1, 4, 9, 16}) {
          INFO(fmt::format("{} FC1 {} FC2 {} M={}", to_string(f), fc1, fc2, m));
          HostInputs in = make_random_inputs(spec, m, ++seed, true);
          DeviceInputs d = upload_inputs(runtime(), *layer, in, m);
          ::setenv("MOEJIT_DECODE_FC1", fc1, 1);
          ::setenv("MOEJIT_DECODE_FC2", fc2, 1);
          ::setenv("MOEJIT_DECODE_COLUMNS", "8", 1);
          REQUIRE(decode_columns_of(runtime().plan(*layer, m, Family::decode)) == std::vector<int>{8, 8});
          const auto all = run_decode(runtime(), *layer, d, m);
          ::setenv("MOEJIT_DECODE_COLUMNS", "4", 1);
          REQUIRE(decode_columns_of(runtime().plan(*layer, m, Family::decode)) == std::vector<int>{4, 4});
          const auto even = run_decode(runtime(), *layer, d, m);
          CHECK(even == all);
          check_agreement(compare(to_float(even), reference_forward(host, in).out_f64), /*with_cosine=*/false);
        }
  }
}

TEST_CASE("the streaming FC1 equals the register-fed loop bit for bit", "[gpu][variants][stream]") {
  // decode_fc1_stream splits and sums a slab's chunks exactly like decode_fc1_loop with as many warps,
  // so the outputs must be identical. Shapes: stages that end mid-slab (H = 2880: 45 chunks in stages of
  // 16 and 8), a slab shorter than one stage (H = 256), one matrix (relu2), K not a multiple of 64
  // (H = 96), several passes per slab (M = 16: up to 16 pairs per expert), and rings of 1-5 stages.
  const ScopedEnv guard{"MOEJIT_DECODE_FC1", "MOEJIT_DECODE_FC2", "MOEJIT_DECODE_TILE_FC1"};
  struct Shape {
    ScaleFormat format;
    Activation act;
    int hidden, intermediate;
    const char* stream_tile;  // w<warps>d<stages>p<chunks per warp and stage>
    const char* loop_tile;    // the same warps, weights in registers
  };
  const Shape shapes[] = {
      {ScaleFormat::mxfp4, Activation::swigluoai, 2880, 256, "w4d4p4", "w4d1"},
      {ScaleFormat::nvfp4, Activation::silu, 2880, 256, "w8d3p1", "w8d1"},
      {ScaleFormat::nvfp4, Activation::relu2, 256, 512, "w4d2p4", "w4d1"},
      {ScaleFormat::mxfp4, Activation::gelu_tanh, 96, 160, "w2d1p1", "w2d1"},
      {ScaleFormat::nvfp4, Activation::silu, 1024, 128, "w4d5p2", "w4d1"},
  };
  uint64_t seed = 7000;
  for (const Shape& sh : shapes) {
    const bool oai = sh.act == Activation::swigluoai;
    LayerSpec spec = small_spec(sh.format, sh.act, oai, oai);
    spec.experts = 16;
    spec.top_k = 4;
    spec.hidden = sh.hidden;
    spec.intermediate = sh.intermediate;
    HostLayer host = make_random_layer(spec, ++seed);
    auto layer = runtime().prepare(host);
    for (int m : {1, 3, 16}) {
      INFO(fmt::format("{} {} H={} I={} stream {} M={}", to_string(sh.format), to_string(sh.act), sh.hidden,
                       sh.intermediate, sh.stream_tile, m));
      HostInputs in = make_random_inputs(spec, m, ++seed, true);
      DeviceInputs d = upload_inputs(runtime(), *layer, in, m);
      ::setenv("MOEJIT_DECODE_FC2", "sum", 1);
      ::setenv("MOEJIT_DECODE_FC1", "loop", 1);
      ::setenv("MOEJIT_DECODE_TILE_FC1", sh.loop_tile, 1);
      const auto loop_out = run_decode(runtime(), *layer, d, m);
      ::setenv("MOEJIT_DECODE_FC1", "stream", 1);
      ::setenv("MOEJIT_DECODE_TILE_FC1", sh.stream_tile, 1);
      REQUIRE(runtime().plan(*layer, m, Family::decode).kernels.front().kind == KernelKind::decode_fc1_stream);
      const auto stream_out = run_decode(runtime(), *layer, d, m);
      CHECK(stream_out == loop_out);
      check_agreement(compare(to_float(stream_out), reference_forward(host, in).out_f64), /*with_cosine=*/false);
    }
  }
}

TEST_CASE("L2 prefetch distances change no output bit", "[gpu][variants][prefetch]") {
  // l2_ahead only adds prefetch.global.L2 requests for chunks the warp loads later (never past its
  // part's last chunk), so every FC1 x FC2 variant must give the same bits at any distance. Shapes: I
  // and H not multiples of 64 (tails), parts shorter than the distance, several passes per slab (M = 16).
  const ScopedEnv guard{"MOEJIT_DECODE_FC1", "MOEJIT_DECODE_FC2", "MOEJIT_DECODE_TILE_FC1", "MOEJIT_DECODE_TILE_FC2"};
  uint64_t seed = 9100;
  for (ScaleFormat f : {ScaleFormat::nvfp4, ScaleFormat::mxfp4}) {
    LayerSpec spec = format_spec(f, 8, 4, 352, 480);
    HostLayer host = make_random_layer(spec, ++seed);
    auto layer = runtime().prepare(host);
    for (const char* fc1 : {"grid", "loop"})
      for (const char* fc2 : {"split", "sum"})
        for (int m : {1, 5, 16}) {
          INFO(fmt::format("{} FC1 {} FC2 {} M={}", to_string(f), fc1, fc2, m));
          HostInputs in = make_random_inputs(spec, m, ++seed, true);
          DeviceInputs d = upload_inputs(runtime(), *layer, in, m);
          ::setenv("MOEJIT_DECODE_FC1", fc1, 1);
          ::setenv("MOEJIT_DECODE_FC2", fc2, 1);
          ::setenv("MOEJIT_DECODE_TILE_FC1", "w4d1f0", 1);
          ::setenv("MOEJIT_DECODE_TILE_FC2", "w4d2p2f0", 1);
          REQUIRE(decode_l2_ahead_of(runtime().plan(*layer, m, Family::decode)) == std::vector<int>{0, 0});
          const auto none = run_decode(runtime(), *layer, d, m);
          for (const char* ahead : {"f1", "f3", "f16"}) {
            ::setenv("MOEJIT_DECODE_TILE_FC1", fmt::format("w4d1{}", ahead).c_str(), 1);
            ::setenv("MOEJIT_DECODE_TILE_FC2", fmt::format("w4d2p2{}", ahead).c_str(), 1);
            const int want = std::atoi(ahead + 1);
            REQUIRE(decode_l2_ahead_of(runtime().plan(*layer, m, Family::decode)) == std::vector<int>{want, want});
            CHECK(run_decode(runtime(), *layer, d, m) == none);
          }
          check_agreement(compare(to_float(none), reference_forward(host, in).out_f64), /*with_cosine=*/false);
        }
  }
}

TEST_CASE("FC2-sum spread over several CTAs per slab matches the reference", "[gpu][variants][groups]") {
  // groups > 1: CTA g of a slab takes every groups-th block of `warps` units, writes its pairs' rows to
  // the partial buffer, and the slab's last CTA (ticket) sums them. Shapes: H = 352 (22 slabs), I = 480
  // (a half chunk at the end of K), groups 2-8 with 1-4 parts, CTAs whose blocks find no unit (8 groups
  // at one token), several passes per slab (M = 16), a token routed twice to one expert; repeated runs
  // must give the same bits (the counters return to zero).
  for_each_fc2_sum_case(
      9900, {1, 5, 16}, {"w8d1p2g2", "w4d1p2g2", "w4d1p1g4", "w8d2p4g2", "w6d1p2g3", "w2d1p1g8"},
      [](const HostLayer& host, const PreparedLayer& layer, const HostInputs& in, DeviceInputs& d, int m,
         const char* tile) {
        ::setenv("MOEJIT_DECODE_TILE_FC2", tile, 1);
        REQUIRE(runtime().plan(layer, m, Family::decode).kernels.back().groups > 1);
        const auto out = run_decode(runtime(), layer, d, m);
        CHECK(run_decode(runtime(), layer, d, m) == out);
        CHECK(run_decode(runtime(), layer, d, m) == out);
        check_agreement(compare(to_float(out), reference_forward(host, in).out_f64), /*with_cosine=*/false);
      });
}

TEST_CASE("FC2-sum over two slabs per CTA gives the bits of one slab per CTA", "[gpu][variants][slabs]") {
  // slabs = 2: each warp carries two adjacent 16-row slabs of its unit's expert through every chunk.
  // Each slab's sums run in the same order as in one-slab CTAs of the same warps and parts, so the
  // output bits must match those. Shapes: H = 352 (11 CTAs of 32 rows), I = 480 (a half chunk at the
  // end of K), warps without a unit (w16 at one token), several passes (M = 16 in 4 columns), a token
  // routed twice to one expert; and the reference.
  for_each_fc2_sum_case(
      9950, {1, 2, 5, 16}, {"w16d1o1p4", "w16d2o1p2", "w8d1o2p2c4f2", "w4d1o4p1", "w6d1o2p3c4"},
      [](const HostLayer& host, const PreparedLayer& layer, const HostInputs& in, DeviceInputs& d, int m,
         const char* tile) {
        // The same tile with s2 before its c/f suffixes.
        std::string two(tile);
        const auto at = two.find_first_of("cf");
        two.insert(at == std::string::npos ? two.size() : at, "s2");
        INFO("two slabs: " << two);
        ::setenv("MOEJIT_DECODE_TILE_FC2", tile, 1);
        REQUIRE(runtime().plan(layer, m, Family::decode).kernels.back().slabs == 1);
        const auto out_one = run_decode(runtime(), layer, d, m);
        ::setenv("MOEJIT_DECODE_TILE_FC2", two.c_str(), 1);
        REQUIRE(runtime().plan(layer, m, Family::decode).kernels.back().slabs == 2);
        const auto out_two = run_decode(runtime(), layer, d, m);
        CHECK(out_two == out_one);
        CHECK(run_decode(runtime(), layer, d, m) == out_two);
        check_agreement(compare(to_float(out_two), reference_forward(host, in).out_f64), /*with_cosine=*/false);
      });
}

TEST_CASE("a staged x row changes no output bit", "[gpu][variants][staged]") {
  // At one token FC1's warps may copy their part of x, times 2^64, into shared memory and read their
  // MMA pieces from there (x_staged): the MMA inputs are the same bits, so the outputs must be too.
  // Shapes: H = 352 (the last chunk half past K), parts of 1-6 chunks, rings with and without the
  // activation ring (w4d1 at 8 CTAs per SM has none), 4 and 8 columns, and a token routed twice to one
  // expert (two columns of one row).
  const ScopedEnv guard{"MOEJIT_DECODE_FC1", "MOEJIT_DECODE_TILE_FC1"};
  uint64_t seed = 9700;
  for (ScaleFormat f : {ScaleFormat::nvfp4, ScaleFormat::mxfp4})
    for (int hidden : {352, 2880}) {
      LayerSpec spec = format_spec(f, 8, 4, hidden, 480);
      HostLayer host = make_random_layer(spec, ++seed);
      auto layer = runtime().prepare(host);
      ::setenv("MOEJIT_DECODE_FC1", "grid", 1);
      for (const char* tile : {"w4d1o8", "w4d1o6c4", "w2d2c4", "w1d1", "w8d1"})
        for (bool twice : {false, true}) {
          INFO(fmt::format("{} H={} tile {} routed twice {}", to_string(f), hidden, tile, twice));
          HostInputs in = make_random_inputs(spec, 1, ++seed, true);
          if (twice) in.topk_ids[1] = spec.expert_begin + 2, in.topk_ids[2] = spec.expert_begin + 2;
          DeviceInputs d = upload_inputs(runtime(), *layer, in, 1);
          ::setenv("MOEJIT_DECODE_TILE_FC1", fmt::format("{}x0", tile).c_str(), 1);
          REQUIRE(!runtime().plan(*layer, 1, Family::decode).kernels.front().x_staged);
          const auto loaded = run_decode(runtime(), *layer, d, 1);
          ::setenv("MOEJIT_DECODE_TILE_FC1", fmt::format("{}x1", tile).c_str(), 1);
          REQUIRE(runtime().plan(*layer, 1, Family::decode).kernels.front().x_staged);
          const auto staged = run_decode(runtime(), *layer, d, 1);
          CHECK(staged == loaded);
          check_agreement(compare(to_float(staged), reference_forward(host, in).out_f64), /*with_cosine=*/false);
        }
    }
}

TEST_CASE("ids outside the local range contribute nothing; all-invalid rows are zero", "[gpu][routing]") {
  LayerSpec spec = small_spec(ScaleFormat::mxfp4, Activation::silu, true, false);
  HostLayer host = make_random_layer(spec, 5);
  auto layer = runtime().prepare(host);
  HostInputs in = make_random_inputs(spec, 9, 6, false);
  for (int k = 0; k < spec.top_k; ++k) {
    in.topk_ids[0 * spec.top_k + k] = -1;                                   // token 0: nothing local
    in.topk_ids[1 * spec.top_k + k] = spec.expert_begin + spec.experts + k; // token 1: another rank's experts
  }
  in.topk_ids[2 * spec.top_k] = spec.expert_begin - 1;
  DeviceInputs d = upload_inputs(runtime(), *layer, in, in.tokens);
  auto out = run_decode(runtime(), *layer, d, in.tokens);
  for (int h = 0; h < spec.hidden; ++h) {
    CHECK(out[h] == 0);
    CHECK(out[spec.hidden + h] == 0);
  }
  ReferenceOutput ref = reference_forward(host, in);
  check_agreement(compare(to_float(out), ref.out_f64), /*with_cosine=*/true);  // token 2's foreign id element-wise too

  // Every id invalid: the whole output is written, with zeros.
  for (auto& id : in.topk_ids) id = -1;
  DeviceInputs d2 = upload_inputs(runtime(), *layer, in, in.tokens);
  auto zeros = run_decode(runtime(), *layer, d2, in.tokens);
  for (auto v : zeros) CHECK(v == 0);
}

TEST_CASE("the tolerance catches wrong kernels", "[gpu][tolerance]") {
  // The agreement checks pass the right layer and fail layers whose gate and up rows are exchanged or
  // whose FC1 or FC2 block scales are moved by one block, in both formats and both families.
  struct Variant {
    ScaleFormat format;
    Activation act;
  };
  for (const Variant v : {Variant{ScaleFormat::nvfp4, Activation::silu}, Variant{ScaleFormat::mxfp4, Activation::swigluoai}})
    for (const Family family : {Family::decode, Family::batch}) {
      INFO(fmt::format("{} {} {}", to_string(v.format), to_string(v.act), family == Family::decode ? "decode" : "batch"));
      const bool oai = v.act == Activation::swigluoai;
      LayerSpec spec = small_spec(v.format, v.act, oai, oai);
      HostLayer host = make_random_layer(spec, 11);
      HostInputs in = make_random_inputs(spec, 16, 12, false);
      ReferenceOutput ref = reference_forward(host, in);
      auto run = [&](const HostLayer& device_layer) {
        auto layer = runtime().prepare(device_layer);
        DeviceInputs d = upload_inputs(runtime(), *layer, in, in.tokens);
        return compare(to_float(run_poisoned(runtime(), *layer, d, in.tokens, family)), ref.out_f64);
      };
      const Agreement right = run(host);
      check_agreement(right, /*with_cosine=*/true);
      HostLayer swapped = host;  // gate and up rows read in the wrong order
      swapped.spec.gate_up_order = oai ? GateUpOrder::gate_up : GateUpOrder::up_gate;
      CHECK(run(swapped).rel_l2 > 10 * kRelL2Tolerance);
      // Every row's scales moved by one block: FC1 (K = H) and FC2 (K = I).
      auto rotate_rows = [](std::vector<uint8_t>& scales, int blocks) {
        for (size_t r = 0; r < scales.size() / blocks; ++r)
          std::rotate(scales.begin() + r * blocks, scales.begin() + r * blocks + 1, scales.begin() + (r + 1) * blocks);
      };
      HostLayer shifted1 = host;
      rotate_rows(shifted1.w13_scale, spec.hidden / scale_block(spec.format));
      CHECK(run(shifted1).rel_l2 > 10 * kRelL2Tolerance);
      HostLayer shifted2 = host;
      rotate_rows(shifted2.w2_scale, spec.intermediate / scale_block(spec.format));
      CHECK(run(shifted2).rel_l2 > 10 * kRelL2Tolerance);
    }
}

TEST_CASE("graph replay equals eager execution and runs are bit-identical", "[gpu][graph]") {
  using namespace moejit::detail;
  LayerSpec spec = small_spec(ScaleFormat::mxfp4, Activation::swigluoai, true, true);
  spec.experts = 16;
  spec.top_k = 4;
  HostLayer host = make_random_layer(spec, 21);
  auto& rt = runtime();
  auto layer = rt.prepare(host);
  const int m = 33;
  HostInputs in = make_random_inputs(spec, m, 22, true);
  DeviceInputs d = upload_inputs(rt, *layer, in, m);
  rt.prewarm(*layer, m, Family::decode);
  auto eager1 = run_decode(rt, *layer, d, m);
  auto eager2 = run_decode(rt, *layer, d, m);
  CHECK(eager1 == eager2);

  check_graph_replays(rt, *layer, d, m, Family::decode, eager1);
}

TEST_CASE("forwards alternating two inputs on one workspace reproduce their outputs", "[gpu][graph][alternate]") {
  // FC2 starts before FC1 has written its activation rows (programmatic dependent launch), at the same
  // workspace addresses as the previous forward's rows: it must never see that forward's values (FC2
  // once read them through the non-coherent path, which an SM may serve from lines an earlier forward
  // left in its L1). Two input sets share one workspace and alternate; every output must equal the
  // first output of its set bit for bit. Per-expert shapes of DeepSeek-V3 (NVFP4, where the bench saw
  // it) and gpt-oss-120b (MXFP4), 32 experts, so the planner picks the kernels those models run.
  uint64_t seed = 9200;
  for (ScaleFormat f : {ScaleFormat::nvfp4, ScaleFormat::mxfp4}) {
    const bool oai = f == ScaleFormat::mxfp4;
    LayerSpec spec = format_spec(f, 32, oai ? 4 : 8, oai ? 2880 : 7168, oai ? 2880 : 2048);
    spec.expert_begin = 0;
    HostLayer host = make_random_code_layer(spec, ++seed);
    auto& rt = runtime();
    auto layer = rt.prepare(host);
    for (int m : {1, 2, 4, 8}) {
      INFO(fmt::format("{} M={}", to_string(f), m));
      const HostInputs in_a = make_random_inputs(spec, m, ++seed, true);
      const HostInputs in_b = make_random_inputs(spec, m, ++seed, true);
      DeviceInputs a = upload_inputs(rt, *layer, in_a, m);
      DeviceInputs b = upload_inputs(rt, *layer, in_b, m);
      auto run = [&](DeviceInputs& d) {
        d.out.fill_bytes(0xFF);
        ForwardArgs args = args_for(d, m);
        args.force = Family::decode;
        args.workspace = a.workspace.ptr();  // one workspace for both input sets
        rt.forward(*layer, args);
        return d.out.to_vector<uint16_t>(static_cast<size_t>(m) * spec.hidden);
      };
      const auto first_a = run(a), first_b = run(b);
      REQUIRE(first_a != first_b);
      check_agreement(compare(to_float(first_a), reference_forward(host, in_a).out_f64), /*with_cosine=*/true);
      check_agreement(compare(to_float(first_b), reference_forward(host, in_b).out_f64), /*with_cosine=*/true);
      int mismatches = 0;
      for (int rep = 0; rep < 16; ++rep) {
        mismatches += run(a) != first_a;
        mismatches += run(b) != first_b;
      }
      CHECK(mismatches == 0);
    }
  }
}

TEST_CASE("forward rejects bad arguments before launching", "[gpu][errors]") {
  LayerSpec spec = small_spec(ScaleFormat::mxfp4, Activation::silu, false, false);
  HostLayer host = make_random_layer(spec, 31);
  auto& rt = runtime();
  auto layer = rt.prepare(host);
  HostInputs in = make_random_inputs(spec, 4, 32, false);
  DeviceInputs d = upload_inputs(rt, *layer, in, 4);
  d.out.fill_bytes(0xFF);
  ForwardArgs a = args_for(d, 8);  // workspace sized for 4 tokens
  CHECK_THROWS_WITH(rt.forward(*layer, a), Catch::Contains("workspace"));
  a = args_for(d, 4);
  a.x = 0;
  CHECK_THROWS_WITH(rt.forward(*layer, a), Catch::Contains("x is null"));
  a = args_for(d, 4);
  a.out += 2;
  CHECK_THROWS_WITH(rt.forward(*layer, a), Catch::Contains("out must be 16-byte aligned"));
  a = args_for(d, 4);
  a.tokens = -1;
  CHECK_THROWS_WITH(rt.forward(*layer, a), Catch::Contains("tokens"));
  a = args_for(d, 4);
  a.topk_ids = 0;
  CHECK_THROWS_WITH(rt.forward(*layer, a), Catch::Contains("topk_ids"));
  CHECK_THROWS_WITH(rt.workspace_size(*layer, 0), Catch::Contains("max_tokens"));
  CHECK_THROWS_WITH(rt.workspace_size(*layer, kMaxTokens + 1), Catch::Contains("max_tokens"));
  CHECK_THROWS_WITH(rt.prewarm(*layer, 0), Catch::Contains("prewarm: max_tokens"));
  CHECK_THROWS_WITH(rt.prewarm(*layer, kMaxTokens + 1), Catch::Contains("prewarm: max_tokens"));
  // Refused means nothing ran: every call above was made with out poisoned, and out still holds the poison.
  detail::check(detail::driver().cuCtxSynchronize(), "cuCtxSynchronize");
  CHECK(d.out.to_vector<uint16_t>(4 * static_cast<size_t>(spec.hidden)) ==
        std::vector<uint16_t>(4 * static_cast<size_t>(spec.hidden), 0xFFFF));
}

TEST_CASE("forward during stream capture refuses to compile or load, and works after prewarm", "[gpu][graph]") {
  using namespace moejit::detail;
  LayerSpec spec = small_spec(ScaleFormat::nvfp4, Activation::relu2, false, false);
  Runtime fresh;  // its own module registry: no decode module is loaded yet
  auto layer = fresh.prepare(make_random_layer(spec, 41));
  const int m = 3;
  HostInputs in = make_random_inputs(spec, m, 42, false);
  DeviceInputs d = upload_inputs(fresh, *layer, in, m);
  OwnedStream stream;
  ForwardArgs a = args_for(d, m);
  a.force = Family::decode;
  a.stream = stream.get();

  // The capture is ended (and its partial graph dropped) when forward throws inside it.
  CHECK_THROWS_WITH(CapturedGraph(stream.get(), CU_STREAM_CAPTURE_MODE_RELAXED, [&] { fresh.forward(*layer, a); }),
                    Catch::Contains("prewarm"));
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_ACTIVE;
  check(driver().cuStreamIsCapturing(stream.get(), &status), "cuStreamIsCapturing");
  CHECK(status == CU_STREAM_CAPTURE_STATUS_NONE);

  fresh.prewarm(*layer, m, Family::decode);
  auto eager = run_decode(fresh, *layer, d, m);
  const CapturedGraph graph(stream.get(), CU_STREAM_CAPTURE_MODE_RELAXED, [&] { fresh.forward(*layer, a); });
  d.out.fill_bytes(0xFF);
  graph.launch(stream.get());
  check(driver().cuStreamSynchronize(stream.get()), "cuStreamSynchronize");
  CHECK(d.out.to_vector<uint16_t>(static_cast<size_t>(m) * spec.hidden) == eager);
}
