// The a8 (MXFP8) and a4 (NVFP4) activation modes of DESIGN §1 in the fp64 reference: hand-worked blocks
// for each quantizer rule, properties over random rows, and the layer in each mode against a16.
#include "catch_compat.hpp"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "moejit/codecs.hpp"
#include "moejit/error.hpp"
#include "moejit/host_layer.hpp"
#include "moejit/reference.hpp"

using namespace moejit;
using Catch::Contains;

namespace {
std::vector<double> quantized(ActPrecision p, std::vector<double> v, double gs = 1.0) {
  quantize_activations(p, v.data(), static_cast<int64_t>(v.size()), gs);
  return v;
}
}  // namespace

TEST_CASE("activation blocks: 32 for a8, 16 for a4, per element for a16", "[reference][actquant]") {
  CHECK(activation_block(ActPrecision::a16) == 1);
  CHECK(activation_block(ActPrecision::a8) == 32);
  CHECK(activation_block(ActPrecision::a4) == 16);
}

TEST_CASE("a8: MXFP8 with the OCP shared exponent floor(log2 amax) - 8", "[reference][actquant]") {
  // amax 3 = 1.5 * 2^1: X = 1 - 8 = -7, so elements are e4m3(v * 128) / 128.
  std::vector<double> v(32, 0.0);
  v[0] = 3.0;     // 384 = 1.5 * 2^8: exact
  v[1] = 0.1;     // 12.8 -> 13 (spacing 1 in [8, 16)) -> 0.1015625
  v[2] = -0.1;    // the sign is kept
  v[3] = 2.9;     // 371.2 -> 384 (spacing 32 in [256, 448]) -> 3.0
  v[4] = 1e-5;    // 0.00128 -> subnormal spacing 2^-9: 0.00128 * 512 = 0.655 -> 1 * 2^-9 -> 2^-16
  v[5] = 0.0625;  // 8 -> exact
  const auto q = quantized(ActPrecision::a8, v);
  CHECK(q[0] == 3.0);
  CHECK(q[1] == 13.0 / 128);
  CHECK(q[2] == -13.0 / 128);
  CHECK(q[3] == 3.0);
  CHECK(q[4] == std::ldexp(1.0, -9 - 7));
  CHECK(q[5] == 0.0625);
  CHECK(q[6] == 0.0);

  // A block maximum in [448, 512) * 2^X saturates to 448 * 2^X: amax 3.9 -> 499.2 -> 448 -> 3.5.
  std::vector<double> s(32, 1.0);
  s[7] = 3.9;
  CHECK(quantized(ActPrecision::a8, s)[7] == 3.5);

  // Each block of 32 has its own exponent: a huge value in block 0 leaves block 1's small values exact.
  std::vector<double> two(64, 0.0);
  two[0] = 1000.0;  // X = 9 - 8 = 1: 1000 / 2 = 500 -> saturates to 448 -> 896
  two[1] = 1.0;     // 0.5 -> exact in e4m3 -> 1.0
  two[32] = 0.3;    // X = -2 - 8 = -10: 307.2 -> 320 (spacing 32) -> 0.3125
  const auto t = quantized(ActPrecision::a8, two);
  CHECK(t[0] == 896.0);
  CHECK(t[1] == 1.0);
  CHECK(t[32] == 320.0 / 1024);

  // A last block shorter than 32 (K a multiple of 16 only) is quantized on its own elements.
  std::vector<double> tail(48, 0.0);
  tail[40] = 0.75;  // X = -1 - 8 = -9: 384 -> exact
  tail[41] = 0.01;  // 5.12 -> 5 -> 5 / 512
  const auto u = quantized(ActPrecision::a8, tail);
  CHECK(u[40] == 0.75);
  CHECK(u[41] == 5.0 / 512);
}

TEST_CASE("a4: NVFP4 blocks of 16 under the caller's global scale", "[reference][actquant]") {
  // gs = 2, block amax 3: s = e4m3(3 * 2 / 6) = 1, elements e2m1(v * 2) / 2.
  std::vector<double> v(16, 0.0);
  v[0] = 3.0;    // 6 -> 6 -> 3
  v[1] = 1.0;    // 2 -> 2 -> 1
  v[2] = 0.7;    // 1.4 -> 1.5 -> 0.75
  v[3] = -0.2;   // -0.4 -> -0.5 -> -0.25
  v[4] = 0.125;  // 0.25 -> tie between 0 and 0.5: even (0) -> 0
  v[5] = 1.25;   // 2.5 -> tie between 2 and 3: even (2) -> 1
  const auto q = quantized(ActPrecision::a4, v, 2.0);
  CHECK(q[0] == 3.0);
  CHECK(q[1] == 1.0);
  CHECK(q[2] == 0.75);
  CHECK(q[3] == -0.25);
  CHECK(q[4] == 0.0);
  CHECK(q[5] == 1.0);

  // The block scale is rounded to e4m3 first: amax 1.1, gs 1 -> 0.18333 -> e4m3 0.1875 (spacing 2^-6 in
  // [0.125, 0.25)); 1.1 / 0.1875 = 5.87 -> 6 -> 1.125; 0.5 / 0.1875 = 2.67 -> 3 -> 0.5625.
  std::vector<double> w(16, 0.0);
  w[0] = 1.1;
  w[1] = 0.5;
  const auto r = quantized(ActPrecision::a4, w, 1.0);
  CHECK(r[0] == 6 * 0.1875);
  CHECK(r[1] == 3 * 0.1875);

  // A block whose scale underflows e4m3 becomes zeros with their signs.
  std::vector<double> tiny(16, 0.0);
  tiny[0] = -1e-12;
  const auto z = quantized(ActPrecision::a4, tiny, 1.0);
  CHECK(z[0] == 0.0);
  CHECK(std::signbit(z[0]));

  CHECK_THROWS_WITH(quantized(ActPrecision::a4, v, 0.0), Contains("global scale") && Contains("> 0"));
  CHECK_THROWS_WITH(quantized(ActPrecision::a4, v, std::nan("")), Contains("global scale"));
}

TEST_CASE("a16 rounds to bf16; non-finite values poison their block", "[reference][actquant]") {
  const auto q = quantized(ActPrecision::a16, {1.0 + 0x1p-8, 1.0 + 0x1p-7 + 0x1p-12});
  CHECK(q[0] == 1.0);                // a tie between 1 and 1 + 2^-7 rounds to even
  CHECK(q[1] == 1.0 + 0x1p-7);
  for (ActPrecision p : {ActPrecision::a8, ActPrecision::a4}) {
    std::vector<double> v(64, 1.0);
    v[3] = std::numeric_limits<double>::infinity();
    const auto r = quantized(p, v, 6.0);  // a4: scale e4m3(1 * 6 / 6) = 1, so 1.0 stays exact
    const int block = activation_block(p);
    for (int j = 0; j < block; ++j) CHECK(std::isnan(r[j]));
    CHECK(r[block] == 1.0);  // the next block is unaffected
  }
}

TEST_CASE("quantized activations are idempotent and within their formats' rounding error", "[reference][actquant]") {
  std::mt19937_64 rng(42);
  std::normal_distribution<double> normal(0.0, 1.0);
  for (ActPrecision p : {ActPrecision::a8, ActPrecision::a4}) {
    for (int trial = 0; trial < 50; ++trial) {
      std::vector<double> v(96);
      const double spread = std::ldexp(1.0, trial % 9 - 4);
      for (auto& x : v) x = normal(rng) * spread;
      const double gs = p == ActPrecision::a4 ? 448.0 * 6.0 / (4.0 * spread) : 1.0;
      const auto q = quantized(p, v, gs);
      CHECK(quantized(p, q, gs) == q);  // a value on the grid stays there
      const int block = activation_block(p);
      for (size_t b = 0; b < v.size(); b += block) {
        double amax = 0;
        for (int j = 0; j < block; ++j) amax = std::max(amax, std::fabs(v[b + j]));
        int k;
        std::frexp(amax, &k);
        --k;  // amax in [2^k, 2^(k+1))
        for (int j = 0; j < block; ++j) {
          // a8: half the e4m3 spacing of the block's top binade, 2^(k-4), or for elements above the
          // saturation point 448 * 2^(k-8), their distance to it. a4: one e2m1 step of 2 at the top
          // halved, times a block scale that e4m3 rounding leaves at most 17/16 of amax / 6.
          const double bound = p == ActPrecision::a8 ? std::max(std::ldexp(1.0, k - 4), amax - std::ldexp(448.0, k - 8))
                                                     : amax * 17.0 / 96.0;
          INFO("precision " << to_string(p) << " trial " << trial << " element " << b + j);
          CHECK(std::fabs(q[b + j] - v[b + j]) <= bound);
        }
      }
    }
  }
}

TEST_CASE("reference_forward in a8 and a4 stays near a16 and follows its own quantizer", "[reference][actquant]") {
  for (ScaleFormat f : {ScaleFormat::nvfp4, ScaleFormat::mxfp4}) {
    LayerSpec spec;
    spec.format = f;
    spec.activation = Activation::silu;
    spec.experts = 4;
    spec.hidden = 128;
    spec.intermediate = 96;
    spec.top_k = 2;
    const HostLayer layer = make_random_layer(spec, 11);
    const HostInputs in = make_random_inputs(spec, 5, 12, true);
    const ReferenceOutput r16 = reference_forward(layer, in);
    double ref2 = 0;
    for (double v : r16.out_f64) ref2 += v * v;
    // a4 scales calibrated as NVFP4 checkpoints calibrate their input scales: gs = 448 * 6 / amax of each
    // tensor over a calibration batch (other tokens than the ones checked), so the largest blocks land at
    // the top of the e4m3 x e2m1 grid and few saturate. (Saturation is tested on purpose below.)
    const ActivationScales scales = calibrate_a4_scales(layer, make_random_inputs(spec, 64, 13, false), false);
    for (ActPrecision p : {ActPrecision::a8, ActPrecision::a4}) {
      INFO(to_string(f) << " " << to_string(p));
      const ReferenceOutput r = reference_forward(layer, in, p, scales);
      double d2 = 0;
      for (size_t i = 0; i < r.out_f64.size(); ++i) d2 += (r.out_f64[i] - r16.out_f64[i]) * (r.out_f64[i] - r16.out_f64[i]);
      const double rel = std::sqrt(d2 / ref2);
      UNSCOPED_INFO("relative L2 against a16: " << rel);
      // MXFP8 rounds each value to 4 significant bits: a relative error uniform in +-2^-4, rms
      // 2^-4 / sqrt(3) = 3.6 %, once in x and once in the intermediate, so ~5 % on the output (measured
      // 5.3-5.7 %). NVFP4 keeps 1-2 bits on a grid of 16 elements scaled to their maximum: ~10 % rms on
      // Gaussian x and more on the heavy-tailed intermediate (measured 16-18 % on the output with the
      // calibrated scales). Nonzero: the modes really quantize.
      CHECK(rel > 0.01);
      CHECK(rel < (p == ActPrecision::a8 ? 0.08 : 0.25));
      for (size_t i = 0; i < r.out.size(); ++i) REQUIRE(r.out[i] == double_to_bf16(r.out_f64[i]));
    }
    // x already on the MXFP8 grid and an intermediate equal to it: the a8 layer's FC1 sees exactly x.
    // Checked through the first token's FC1 input: quantizing x twice changes nothing.
    std::vector<double> x0(spec.hidden);
    for (int h = 0; h < spec.hidden; ++h) x0[h] = bf16_to_float(in.x[h]);
    auto once = x0;
    quantize_activations(ActPrecision::a8, once.data(), spec.hidden);
    auto twice = once;
    quantize_activations(ActPrecision::a8, twice.data(), spec.hidden);
    CHECK(once == twice);
    CHECK(once != x0);
  }
  // The a4 scales are checked.
  LayerSpec spec;
  spec.experts = 2;
  spec.hidden = 64;
  spec.intermediate = 64;
  spec.top_k = 1;
  const HostLayer layer = make_random_layer(spec, 3);
  const HostInputs in = make_random_inputs(spec, 1, 4, false);
  CHECK_THROWS_WITH(reference_forward(layer, in, ActPrecision::a4, {0.0f, 1.0f}), Contains("a1_gs"));
  CHECK_THROWS_WITH(reference_forward(layer, in, ActPrecision::a4, {1.0f, -2.0f}), Contains("a2_gs"));
  CHECK_NOTHROW(reference_forward(layer, in, ActPrecision::a8, {0.0f, 0.0f}));  // a8 ignores them
}

TEST_CASE("a4 saturation: global scales above the calibrated range clip blocks at 448 x 6 / gs", "[reference][actquant]") {
  // One block: with gs = 2688 / 2 (calibrated for amax 2), a block of amax 8 saturates its scale at 448 and
  // every element at 6 x 448 / gs = 2: the block is clipped to the calibrated range, signs kept.
  std::vector<double> v(16, 0.0);
  v[0] = 8.0;
  v[1] = -3.0;
  v[2] = 1.0;
  quantize_activations(ActPrecision::a4, v.data(), 16, 2688.0 / 2);
  CHECK(v[0] == 2.0);
  CHECK(v[1] == -2.0);
  CHECK(v[2] == 1.0);  // 1.0 x 1344 / 448 = 3: on the e2m1 grid

  // A layer: scales 8x its calibration saturate a share of the intermediate's blocks (each clipped at the
  // calibrated range / 8), which moves the output further from a16 than the calibrated scales do.
  LayerSpec spec;
  spec.format = ScaleFormat::nvfp4;
  spec.activation = Activation::silu;
  spec.experts = 4;
  spec.hidden = 128;
  spec.intermediate = 96;
  spec.top_k = 2;
  const HostLayer layer = make_random_layer(spec, 21);
  const HostInputs in = make_random_inputs(spec, 16, 22, false);
  const ActivationScales calibrated = calibrate_a4_scales(layer, make_random_inputs(spec, 64, 23, false), false);
  ActivationScales hot = calibrated;
  hot.a1_gs *= 8;
  hot.a2_gs *= 8;
  const ReferenceOutput r16 = reference_forward(layer, in);
  auto rel_to_a16 = [&](const ActivationScales& s) {
    const ReferenceOutput r = reference_forward(layer, in, ActPrecision::a4, s);
    double d2 = 0, n2 = 0;
    for (size_t i = 0; i < r.out_f64.size(); ++i) {
      d2 += (r.out_f64[i] - r16.out_f64[i]) * (r.out_f64[i] - r16.out_f64[i]);
      n2 += r16.out_f64[i] * r16.out_f64[i];
    }
    return std::sqrt(d2 / n2);
  };
  const double rel_calibrated = rel_to_a16(calibrated), rel_hot = rel_to_a16(hot);
  UNSCOPED_INFO("a4 against a16: calibrated " << rel_calibrated << ", scales x8 " << rel_hot);
  CHECK(rel_hot > 1.5 * rel_calibrated);
}

TEST_CASE("calibrated a4 scales: 448 x 6 / amax of x and of the intermediate, per expert or not", "[reference][actquant]") {
  LayerSpec spec;
  spec.format = ScaleFormat::mxfp4;
  spec.activation = Activation::swigluoai;
  spec.experts = 4;
  spec.hidden = 64;
  spec.intermediate = 64;
  spec.top_k = 2;
  spec.expert_begin = 2;
  const HostLayer layer = make_random_layer(spec, 31);
  const HostInputs calib = make_random_inputs(spec, 32, 32, true);
  const ReferenceOutput r = reference_forward(layer, calib);
  const ActivationScales s = calibrate_a4_scales(layer, calib, true);
  double x_all = 0, a_all = 0;
  for (int e = 0; e < spec.experts; ++e) {
    x_all = std::max(x_all, r.x_amax[e]);
    a_all = std::max(a_all, r.act_amax[e]);
  }
  CHECK(s.a1_gs == static_cast<float>(2688.0 / x_all));
  CHECK(s.a2_gs == static_cast<float>(2688.0 / a_all));
  REQUIRE(s.a1_gs_per_expert.size() == 4);
  for (int e = 0; e < spec.experts; ++e) {
    if (r.act_amax[e] > 0) CHECK(s.a2_gs_per_expert[e] == static_cast<float>(2688.0 / r.act_amax[e]));
    CHECK(s.a1_gs_per_expert[e] >= s.a1_gs);  // an expert's tokens are a subset of the batch
  }
  // Per-expert scales: each expert's pairs quantize x with its own a1_gs; with equal values per expert the
  // result is the scalar one's, bit for bit.
  ActivationScales same_per_expert;
  same_per_expert.a1_gs = s.a1_gs;
  same_per_expert.a2_gs = s.a2_gs;
  ActivationScales spread = same_per_expert;
  spread.a1_gs_per_expert.assign(4, s.a1_gs);
  spread.a2_gs_per_expert.assign(4, s.a2_gs);
  CHECK(reference_forward(layer, calib, ActPrecision::a4, same_per_expert).out_f64 ==
        reference_forward(layer, calib, ActPrecision::a4, spread).out_f64);
  CHECK_THROWS_WITH(calibrate_a4_scales(layer, make_random_inputs(spec, 0, 1, false), false), Contains("zero range"));
  ActivationScales short_list = spread;
  short_list.a2_gs_per_expert.pop_back();
  CHECK_THROWS_WITH(reference_forward(layer, calib, ActPrecision::a4, short_list), Contains("a2_gs_per_expert"));
}
