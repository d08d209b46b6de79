// Layer geometry, FC1 row order, the quantizers and the random layer/input generators.
#include "catch_compat.hpp"
#include <cmath>
#include <cstdint>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "moejit/codecs.hpp"
#include "moejit/error.hpp"
#include "moejit/host_layer.hpp"
#include "moejit/types.hpp"

using namespace moejit;
using Catch::Contains;

namespace {

LayerSpec make_spec(ScaleFormat f, Activation a, GateUpOrder order, int E, int H, int I, bool bias) {
  LayerSpec s;
  s.format = f;
  s.activation = a;
  s.gate_up_order = order;
  s.experts = E;
  s.hidden = H;
  s.intermediate = I;
  s.top_k = 2;
  s.has_bias = bias;
  return s;
}

struct FloatLayer {
  std::vector<float> fc1, fc2, b1, b2;
};

FloatLayer random_floats(const LayerSpec& s, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> n(0.0f, 1.0f);
  FloatLayer f;
  const size_t E = s.experts, H = s.hidden, I = s.intermediate, R = s.fc1_rows();
  f.fc1.resize(E * R * H);
  f.fc2.resize(E * H * I);
  for (auto& v : f.fc1) v = n(rng) / std::sqrt(static_cast<float>(H));
  for (auto& v : f.fc2) v = n(rng) / std::sqrt(static_cast<float>(I));
  // One expert with a much smaller range than the others, so per-expert global scales matter.
  for (size_t i = 0; i < R * H; ++i) f.fc1[i] *= 1e-3f;
  if (s.has_bias) {
    f.b1.resize(E * R);
    f.b2.resize(E * H);
    for (auto& v : f.b1) v = 0.1f * n(rng);
    for (auto& v : f.b2) v = 0.1f * n(rng);
  }
  return f;
}

// Dequantized weights of a layer, through the public accessors.
FloatLayer dequantize(const HostLayer& L) {
  const auto& s = L.spec;
  FloatLayer f;
  for (int e = 0; e < s.experts; ++e)
    for (int r = 0; r < s.fc1_rows(); ++r)
      for (int k = 0; k < s.hidden; ++k) f.fc1.push_back(L.fc1_weight(e, r, k));
  for (int e = 0; e < s.experts; ++e)
    for (int r = 0; r < s.hidden; ++r)
      for (int k = 0; k < s.intermediate; ++k) f.fc2.push_back(L.fc2_weight(e, r, k));
  f.b1 = L.w13_bias;
  f.b2 = L.w2_bias;
  return f;
}

// Block scale (times global) of element (row, k) of one expert's matrix.
double element_scale(const HostLayer& L, bool fc1, int e, int row, int k) {
  const auto& s = L.spec;
  const int cols = fc1 ? s.hidden : s.intermediate;
  const int rows = fc1 ? s.fc1_rows() : s.hidden;
  const int block = scale_block(s.format);
  const auto& sc = fc1 ? L.w13_scale : L.w2_scale;
  const uint8_t code = sc[(static_cast<size_t>(e) * rows + row) * (cols / block) + k / block];
  if (s.format == ScaleFormat::nvfp4)
    return static_cast<double>(e4m3_to_float(code)) * (fc1 ? L.w13_global_scale[e] : L.w2_global_scale[e]);
  return e8m0_to_float(code);
}

// Checks |w - dequant(w)| <= half the widest e2m1 gap (1 unit of the element scale) for every element,
// and returns the relative L2 error of the whole matrix.
double check_error(const HostLayer& L, bool fc1, const std::vector<float>& w, const std::vector<float>& dq) {
  const auto& s = L.spec;
  const int rows = fc1 ? s.fc1_rows() : s.hidden, cols = fc1 ? s.hidden : s.intermediate;
  double err2 = 0, ref2 = 0;
  size_t i = 0;
  int bad = 0;
  for (int e = 0; e < s.experts; ++e)
    for (int r = 0; r < rows; ++r)
      for (int k = 0; k < cols; ++k, ++i) {
        const double d = std::fabs(static_cast<double>(w[i]) - dq[i]);
        const double unit = element_scale(L, fc1, e, r, k);
        if (d > unit * (1 + 1e-6)) ++bad;
        err2 += d * d;
        ref2 += static_cast<double>(w[i]) * w[i];
      }
  CHECK(bad == 0);
  return std::sqrt(err2 / ref2);
}

}  // namespace

// ------------------------------------------------------------------------------------ LayerSpec

TEST_CASE("LayerSpec::validate names the field and the rule", "[types][spec]") {
  LayerSpec s = make_spec(ScaleFormat::nvfp4, Activation::silu, GateUpOrder::gate_up, 8, 64, 32, false);
  CHECK_NOTHROW(s.validate());
  auto with = [&](auto mutate) {
    LayerSpec t = s;
    mutate(t);
    return t;
  };
  CHECK_THROWS_WITH(with([](LayerSpec& t) { t.experts = 0; }).validate(), Contains("experts") && Contains("> 0"));
  CHECK_THROWS_WITH(with([](LayerSpec& t) { t.hidden = -16; }).validate(), Contains("hidden"));
  CHECK_THROWS_WITH(with([](LayerSpec& t) { t.intermediate = 0; }).validate(), Contains("intermediate"));
  CHECK_THROWS_WITH(with([](LayerSpec& t) { t.top_k = 0; }).validate(), Contains("top_k"));
  CHECK_THROWS_WITH(with([](LayerSpec& t) { t.hidden = 72; }).validate(),
                    Contains("hidden") && Contains("multiple of 16"));
  CHECK_THROWS_WITH(with([](LayerSpec& t) { t.intermediate = 40; }).validate(),
                    Contains("intermediate") && Contains("multiple of 16"));
  // 48 is a multiple of 16 but not of MXFP4's 32.
  CHECK_THROWS_WITH(with([](LayerSpec& t) { t.format = ScaleFormat::mxfp4; t.intermediate = 48; }).validate(),
                    Contains("multiple of 32") && Contains("mxfp4"));
  // Expert parallelism: top_k may exceed the local expert count.
  CHECK_NOTHROW(with([](LayerSpec& t) { t.experts = 1; t.top_k = 8; }).validate());
  CHECK_THROWS_WITH(with([](LayerSpec& t) { t.expert_begin = -1; }).validate(), Contains("expert_begin"));
  // Limits: silu and swigluoai only, finite and positive.
  CHECK_NOTHROW(with([](LayerSpec& t) { t.limit = 7.0f; }).validate());
  CHECK_THROWS_WITH(with([](LayerSpec& t) { t.activation = Activation::gelu_tanh; t.limit = 7.0f; }).validate(),
                    Contains("limit") && Contains("gelu_tanh"));
  CHECK_THROWS_WITH(with([](LayerSpec& t) { t.activation = Activation::relu2; t.limit = 7.0f; }).validate(),
                    Contains("limit"));
  CHECK_THROWS_WITH(with([](LayerSpec& t) { t.limit = -1.0f; }).validate(), Contains("limit"));
  CHECK_THROWS_WITH(with([](LayerSpec& t) { t.limit = NAN; }).validate(), Contains("limit"));
  CHECK(s.fc1_rows() == 64);
  CHECK(with([](LayerSpec& t) { t.activation = Activation::relu2; }).fc1_rows() == 32);
}

// ------------------------------------------------------------------------------------ row order

TEST_CASE("fc1_row_of maps (gate/up, i) to the logical row of each order", "[layout]") {
  LayerSpec s = make_spec(ScaleFormat::mxfp4, Activation::silu, GateUpOrder::gate_up, 1, 32, 64, false);
  s.gate_up_order = GateUpOrder::gate_up;
  CHECK(fc1_row_of(s, false, 0) == 0);
  CHECK(fc1_row_of(s, false, 63) == 63);
  CHECK(fc1_row_of(s, true, 0) == 64);
  CHECK(fc1_row_of(s, true, 5) == 69);
  s.gate_up_order = GateUpOrder::up_gate;
  CHECK(fc1_row_of(s, true, 0) == 0);
  CHECK(fc1_row_of(s, true, 5) == 5);
  CHECK(fc1_row_of(s, false, 0) == 64);
  CHECK(fc1_row_of(s, false, 5) == 69);
  s.gate_up_order = GateUpOrder::interleaved;
  CHECK(fc1_row_of(s, false, 0) == 0);
  CHECK(fc1_row_of(s, true, 0) == 1);
  CHECK(fc1_row_of(s, false, 5) == 10);
  CHECK(fc1_row_of(s, true, 5) == 11);

  for (auto order : {GateUpOrder::gate_up, GateUpOrder::up_gate, GateUpOrder::interleaved}) {
    s.gate_up_order = order;
    std::set<int> seen;
    for (int i = 0; i < s.intermediate; ++i)
      for (bool up : {false, true}) {
        const int row = fc1_row_of(s, up, i);
        seen.insert(row);
        const Fc1RowRole role = fc1_row_role(s, row);
        CHECK(role.up == up);
        CHECK(role.index == i);
      }
    CHECK(seen.size() == 128);  // a bijection onto [0, 2I)
    CHECK(*seen.rbegin() == 127);
  }
  CHECK_THROWS_WITH(fc1_row_of(s, false, 64), Contains("index"));
  CHECK_THROWS_AS(fc1_row_of(s, false, -1), Error);
  CHECK_THROWS_AS(fc1_row_role(s, 128), Error);

  s.activation = Activation::relu2;  // one matrix W1 of I rows; the order does not apply
  CHECK(fc1_row_of(s, false, 7) == 7);
  CHECK(fc1_row_role(s, 7).index == 7);
  CHECK_THROWS_WITH(fc1_row_of(s, true, 7), Contains("relu2"));
}

// ------------------------------------------------------------------------------------ validate

TEST_CASE("HostLayer::validate names the tensor whose size is wrong", "[layout]") {
  const LayerSpec nv = make_spec(ScaleFormat::nvfp4, Activation::silu, GateUpOrder::gate_up, 2, 32, 16, true);
  const HostLayer good = make_random_layer(nv, 1);
  CHECK_NOTHROW(good.validate());
  auto broken = [&](auto mutate) {
    HostLayer L = good;
    mutate(L);
    return L;
  };
  CHECK_THROWS_WITH(broken([](HostLayer& L) { L.w13.pop_back(); }).validate(), Contains("w13 ") && Contains("[E, 2I, H/2]"));
  CHECK_THROWS_WITH(broken([](HostLayer& L) { L.w13_scale.push_back(0); }).validate(), Contains("w13_scale"));
  CHECK_THROWS_WITH(broken([](HostLayer& L) { L.w2.clear(); }).validate(), Contains("w2 "));
  CHECK_THROWS_WITH(broken([](HostLayer& L) { L.w2_scale.resize(3); }).validate(), Contains("w2_scale"));
  CHECK_THROWS_WITH(broken([](HostLayer& L) { L.w13_global_scale.clear(); }).validate(),
                    Contains("w13_global_scale") && Contains("nvfp4"));
  CHECK_THROWS_WITH(broken([](HostLayer& L) { L.w2_global_scale.resize(5); }).validate(), Contains("w2_global_scale"));
  CHECK_THROWS_WITH(broken([](HostLayer& L) { L.w2_global_scale[1] = INFINITY; }).validate(),
                    Contains("w2_global_scale[1]"));
  CHECK_THROWS_WITH(broken([](HostLayer& L) { L.w13_bias.pop_back(); }).validate(), Contains("w13_bias"));
  CHECK_THROWS_WITH(broken([](HostLayer& L) { L.w2_bias.clear(); }).validate(), Contains("w2_bias"));
  CHECK_THROWS_WITH(broken([](HostLayer& L) { L.spec.has_bias = false; }).validate(),
                    Contains("_bias") && Contains("has_bias"));
  CHECK_THROWS_WITH(broken([](HostLayer& L) { L.spec.hidden = 48; }).validate(), Contains("w13"));
  CHECK_THROWS_WITH(broken([](HostLayer& L) { L.spec.hidden = 40; }).validate(), Contains("multiple of 16"));

  const LayerSpec mx = make_spec(ScaleFormat::mxfp4, Activation::relu2, GateUpOrder::gate_up, 2, 32, 32, false);
  HostLayer m = make_random_layer(mx, 2);
  CHECK_NOTHROW(m.validate());
  CHECK(m.w13.size() == 2u * 32 * 16);  // relu2: I rows of W1 in the w13 field
  m.w13_global_scale = {1.0f, 1.0f};
  CHECK_THROWS_WITH(m.validate(), Contains("w1_global_scale") && Contains("mxfp4"));
  m.w13_global_scale.clear();
  m.w13.pop_back();
  CHECK_THROWS_WITH(m.validate(), Contains("w1 ") && Contains("[E, I, H/2]"));
}

// ------------------------------------------------------------------------------------ quantizers

TEST_CASE("quantize_layer: round trip, error bounds, every format and order", "[quantize]") {
  struct Case {
    ScaleFormat f;
    Activation a;
    GateUpOrder o;
    bool bias;
  };
  const Case cases[] = {
      {ScaleFormat::nvfp4, Activation::silu, GateUpOrder::gate_up, false},
      {ScaleFormat::nvfp4, Activation::swigluoai, GateUpOrder::interleaved, true},
      {ScaleFormat::nvfp4, Activation::relu2, GateUpOrder::gate_up, false},
      {ScaleFormat::nvfp4, Activation::gelu_tanh, GateUpOrder::up_gate, true},
      {ScaleFormat::mxfp4, Activation::silu, GateUpOrder::up_gate, false},
      {ScaleFormat::mxfp4, Activation::swigluoai, GateUpOrder::interleaved, true},
      {ScaleFormat::mxfp4, Activation::relu2, GateUpOrder::gate_up, true},
      {ScaleFormat::mxfp4, Activation::gelu_tanh, GateUpOrder::gate_up, false},
  };
  for (size_t ci = 0; ci < std::size(cases); ++ci) {
    const Case& c = cases[ci];
    const LayerSpec s = make_spec(c.f, c.a, c.o, 3, 128, 64, c.bias);
    DYNAMIC_SECTION(to_string(c.f) << " " << to_string(c.a) << " " << to_string(c.o) << (c.bias ? " bias" : "")) {
      // Seeded by the case's index: Catch2 reruns the test case from the top for each section, so a
      // counter bumped inside the sections would give every case the same seed.
      const FloatLayer w = random_floats(s, 100 + static_cast<uint64_t>(ci));
      const HostLayer q = quantize_layer(s, w.fc1, w.fc2, w.b1, w.b2);
      REQUIRE_NOTHROW(q.validate());
      CHECK(q.w13_bias == w.b1);
      CHECK(q.w2_bias == w.b2);

      // Error: every element within one scale unit (half the 4..6 gap), and a typical FP4 L2 error
      // for Gaussian weights (measured: about 10% NVFP4, 11.5% MXFP4; the bounds leave room).
      const FloatLayer dq = dequantize(q);
      const double e1 = check_error(q, true, w.fc1, dq.fc1), e2 = check_error(q, false, w.fc2, dq.fc2);
      INFO("rel L2 error fc1 " << e1 << " fc2 " << e2);
      const double bound = c.f == ScaleFormat::nvfp4 ? 0.12 : 0.16;
      CHECK(e1 < bound);
      CHECK(e2 < bound);
      CHECK(e1 > 0.02);  // really quantized

      // Idempotence: quantizing the dequantized layer gives back the same codes and scales.
      const HostLayer q2 = quantize_layer(s, dq.fc1, dq.fc2, dq.b1, dq.b2);
      CHECK(q2.w13 == q.w13);
      CHECK(q2.w13_scale == q.w13_scale);
      CHECK(q2.w2 == q.w2);
      CHECK(q2.w2_scale == q.w2_scale);
      CHECK(q2.w13_bias == q.w13_bias);
      REQUIRE(q2.w13_global_scale.size() == q.w13_global_scale.size());
      for (size_t e = 0; e < q.w13_global_scale.size(); ++e) {
        // amax' = fl(6 * 448 * g) and g' = fl(amax' / 2688): equal or one ulp apart; codes do not move.
        CHECK(q2.w13_global_scale[e] == Approx(q.w13_global_scale[e]).epsilon(1e-6));
        CHECK(q2.w2_global_scale[e] == Approx(q.w2_global_scale[e]).epsilon(1e-6));
      }
    }
  }
}

TEST_CASE("quantize_layer: NVFP4 scales by hand", "[quantize]") {
  // E=1, H=16, I=16, relu2 (I rows of W1). Row 0 holds the expert's amax 5.376 = 6 * 448 * 0.002:
  // global = 5.376 / 2688 = 0.002, its block scale is 448 (0x7E) and 5.376 encodes as 6.
  // Row 1 has block max 0.3: ideal scale 0.3 / 6 / 0.002 = 25, not an e4m3 value (24 and 26 are);
  // the scale rounds up to 26 (0x5D = exponent 11, mantissa 5: 1.625 * 16) so the element fits: 0.3 / (26 * 0.002) = 5.77 -> 6.
  LayerSpec s = make_spec(ScaleFormat::nvfp4, Activation::relu2, GateUpOrder::gate_up, 1, 16, 16, false);
  std::vector<float> fc1(16 * 16, 0.0f), fc2(16 * 16, 0.0f);
  fc1[0] = 5.376f;
  fc1[1] = -1.0f;
  fc1[16 + 0] = 0.3f;
  fc1[16 + 1] = -0.104f;  // / 0.052 = -2.0 exactly representable in e2m1
  fc2[0] = 1.0f;
  const HostLayer q = quantize_layer(s, fc1, fc2);
  CHECK(q.w13_global_scale[0] == Approx(0.002f).epsilon(1e-6));
  CHECK(q.w13_scale[0] == 0x7E);
  CHECK(q.w13_scale[1] == 0x5D);
  CHECK(e4m3_to_float(0x5D) == 26.0f);
  CHECK(fp4_nibble(q.w13.data(), 0) == 0x7);       // 5.376 / (448 * 0.002) = 6
  CHECK(fp4_nibble(q.w13.data(), 1) == 0xA);       // -1 / 0.896 = -1.116 -> -1 (code 2, sign 8)
  CHECK(fp4_nibble(q.w13.data(), 16) == 0x7);      // 5.77 -> 6
  CHECK(fp4_nibble(q.w13.data(), 17) == 0xC);      // -2
  CHECK(fp4_nibble(q.w13.data(), 2) == 0x0);
  CHECK(q.w13_scale[2] == 0x00);                   // all-zero rows: scale 0
  CHECK(q.fc1_weight(0, 0, 0) == Approx(5.376f).epsilon(1e-6));
  CHECK(q.fc1_weight(0, 1, 0) == Approx(6 * 26 * 0.002f).epsilon(1e-6));
}

TEST_CASE("quantize_layer: MXFP4 scales by hand", "[quantize]") {
  // E=1, H=32, I=32, relu2. Block maxima and their scales (smallest power of two >= max / 6):
  //   row 0: max 6     -> scale 1 (code 127), 6 -> code 7
  //   row 1: max 6.01  -> scale 2 (code 128), 6.01 / 2 = 3.005 -> 3 (code 5), 1.0 / 2 = 0.5 (code 1)
  //          largest code is 3, so the canonical form halves the scale and doubles the codes:
  //          scale 1 (code 127), codes 6 (7) and 1 (2): the same values 6 and 1.
  //   row 2: max 0.75  -> scale 0.125 (code 124), 0.75 / 0.125 = 6
  //   row 3: all zero  -> scale 1 (code 127), codes 0 (and -0 kept)
  LayerSpec s = make_spec(ScaleFormat::mxfp4, Activation::relu2, GateUpOrder::gate_up, 1, 32, 32, false);
  std::vector<float> fc1(32 * 32, 0.0f), fc2(32 * 32, 0.0f);
  fc1[0] = 6.0f;
  fc1[1] = -0.26f;  // / 1 -> 0.5 (code 9 with sign)
  fc1[32] = 6.01f;
  fc1[33] = 1.0f;
  fc1[64] = -0.75f;
  fc1[96 + 1] = -0.0f;
  const HostLayer q = quantize_layer(s, fc1, fc2);
  CHECK(q.w13_scale[0] == 127);
  CHECK(fp4_nibble(q.w13.data(), 0) == 0x7);
  CHECK(fp4_nibble(q.w13.data(), 1) == 0x9);
  CHECK(q.w13_scale[1] == 127);
  CHECK(fp4_nibble(q.w13.data(), 32) == 0x7);
  CHECK(fp4_nibble(q.w13.data(), 33) == 0x2);
  CHECK(q.w13_scale[2] == 124);
  CHECK(fp4_nibble(q.w13.data(), 64) == 0xF);
  CHECK(q.w13_scale[3] == 127);
  CHECK(fp4_nibble(q.w13.data(), 96) == 0x0);
  CHECK(fp4_nibble(q.w13.data(), 97) == 0x8);
  CHECK(q.fc1_weight(0, 1, 0) == 6.0f);
  CHECK(q.fc1_weight(0, 2, 0) == -0.75f);
}

TEST_CASE("quantize_layer: elements round to nearest even at exact midpoints", "[quantize]") {
  // NVFP4 with a non-power-of-two element scale. amax 2016 gives global 2016 / 2688 = 0.75 (exact).
  // Row 1 has block max 117: ideal scale 117 / 6 / 0.75 = 26, an e4m3 value, so its element scale is
  // 26 * 0.75 = 19.5 and the e2m1 midpoints 0.25 .. 5 sit at 4.875, 14.625, 24.375, 34.125, 48.75,
  // 68.25, 97.5 (all exact floats). Ties go to the even code; one float off a tie goes the other way.
  LayerSpec s = make_spec(ScaleFormat::nvfp4, Activation::relu2, GateUpOrder::gate_up, 1, 16, 16, false);
  std::vector<float> fc1(16 * 16, 0.0f), fc2(16 * 16, 0.0f);
  fc1[0] = 2016.0f;
  const float mids[7] = {4.875f, 14.625f, 24.375f, 34.125f, 48.75f, 68.25f, 97.5f};
  const int at_tie[7] = {0, 2, 2, 4, 4, 6, 6};    // codes of the midpoints themselves
  const int off_tie[7] = {1, 1, 3, 3, 5, 5, 7};   // one float towards the odd code
  float* row1 = &fc1[16];
  float* row2 = &fc1[32];
  row1[0] = 117.0f;
  row2[0] = 117.0f;
  for (int t = 0; t < 7; ++t) {
    row1[1 + t] = mids[t];
    row1[8 + t] = -mids[t];
    // Odd codes lie above the even midpoints' tie (0|1, 2|3, 4|5, 6|7 boundaries) and below the others.
    const bool up = t % 2 == 0;
    row2[1 + t] = std::nextafter(mids[t], up ? 1e9f : 0.0f);
  }
  const HostLayer q = quantize_layer(s, fc1, fc2);
  REQUIRE(q.w13_global_scale[0] == 0.75f);
  REQUIRE(e4m3_to_float(q.w13_scale[1]) == 26.0f);
  REQUIRE(e4m3_to_float(q.w13_scale[2]) == 26.0f);
  for (int t = 0; t < 7; ++t) {
    INFO("midpoint " << mids[t]);
    CHECK(fp4_nibble(q.w13.data(), 16 + 1 + t) == at_tie[t]);
    CHECK(fp4_nibble(q.w13.data(), 16 + 8 + t) == (at_tie[t] | 8));
    CHECK(fp4_nibble(q.w13.data(), 32 + 1 + t) == off_tie[t]);
    // The same decisions as the codec on the exact quotient.
    CHECK(double_to_e2m1(static_cast<double>(mids[t]) / 19.5) == at_tie[t]);
  }
}

TEST_CASE("quantize_layer: bad inputs are clear errors", "[quantize]") {
  LayerSpec s = make_spec(ScaleFormat::nvfp4, Activation::silu, GateUpOrder::gate_up, 2, 16, 16, false);
  std::vector<float> fc1(2 * 32 * 16, 0.5f), fc2(2 * 16 * 16, 0.5f);
  CHECK_NOTHROW(quantize_layer(s, fc1, fc2));
  CHECK_THROWS_WITH(quantize_layer(s, std::vector<float>(10), fc2), Contains("fc1") && Contains("[E, 2I, H]"));
  CHECK_THROWS_WITH(quantize_layer(s, fc1, std::vector<float>(10)), Contains("fc2"));
  CHECK_THROWS_WITH(quantize_layer(s, fc1, fc2, std::vector<float>(64), std::vector<float>(32)),
                    Contains("has_bias"));
  s.has_bias = true;
  CHECK_THROWS_WITH(quantize_layer(s, fc1, fc2), Contains("fc1_bias"));
  s.has_bias = false;
  fc1[32 * 16 + 5] = NAN;  // expert 1, row 0, column 5
  CHECK_THROWS_WITH(quantize_layer(s, fc1, fc2), Contains("non-finite") && Contains("expert 1") && Contains("column 5"));
  s.hidden = 24;
  CHECK_THROWS_WITH(quantize_layer(s, fc1, fc2), Contains("multiple of 16"));
}

// ------------------------------------------------------------------------------------ random layers

TEST_CASE("make_random_layer: deterministic, valid, every FP4 code", "[random]") {
  for (auto f : {ScaleFormat::nvfp4, ScaleFormat::mxfp4}) {
    LayerSpec s = make_spec(f, Activation::swigluoai, GateUpOrder::interleaved, 4, 64, 64, true);
    const HostLayer a = make_random_layer(s, 42), b = make_random_layer(s, 42), c = make_random_layer(s, 43);
    REQUIRE_NOTHROW(a.validate());
    CHECK(a.w13 == b.w13);
    CHECK(a.w2_scale == b.w2_scale);
    CHECK(a.w13_bias == b.w13_bias);
    CHECK(a.w13_global_scale == b.w13_global_scale);
    CHECK(a.w13 != c.w13);
    CHECK(a.w2_bias != c.w2_bias);

    // Varied codes, both signs, in both matrices.
    std::set<int> codes1, codes2;
    for (size_t j = 0; j < a.w13.size() * 2; ++j) codes1.insert(fp4_nibble(a.w13.data(), j));
    for (size_t j = 0; j < a.w2.size() * 2; ++j) codes2.insert(fp4_nibble(a.w2.data(), j));
    // Every e2m1 code in both matrices, except -0 (0x8: sign bit, magnitude 0), which is rare but allowed.
    for (int code = 0; code < 16; ++code) {
      if (code == 0x8) continue;
      INFO(to_string(f) << " code 0x" << std::hex << code);
      CHECK(codes1.count(code) == 1);
      CHECK(codes2.count(code) == 1);
    }
    // Weights ~ N(0, 1/sqrt(K)): the dequantized standard deviation is close to 1/sqrt(H).
    double sum2 = 0;
    const int n = 64 * 128;
    for (int r = 0; r < 128; ++r)
      for (int k = 0; k < 64; ++k) sum2 += std::pow(a.fc1_weight(1, r, k), 2);
    CHECK(std::sqrt(sum2 / n) == Approx(1.0 / 8).epsilon(0.1));
    double b2 = 0;
    for (float v : a.w2_bias) b2 += v * v;
    CHECK(std::sqrt(b2 / a.w2_bias.size()) == Approx(0.1).epsilon(0.3));
  }
  // Without bias there are no bias tensors; relu2 has I rows.
  LayerSpec r = make_spec(ScaleFormat::nvfp4, Activation::relu2, GateUpOrder::gate_up, 2, 32, 48, false);
  const HostLayer L = make_random_layer(r, 5);
  CHECK(L.w13_bias.empty());
  CHECK(L.w13.size() == 2u * 48 * 16);
  CHECK_NOTHROW(L.validate());
}

TEST_CASE("make_random_inputs: shapes, id ranges, normalized weights", "[random]") {
  LayerSpec s = make_spec(ScaleFormat::mxfp4, Activation::silu, GateUpOrder::gate_up, 8, 64, 64, false);
  s.top_k = 4;
  s.expert_begin = 16;
  const HostInputs a = make_random_inputs(s, 50, 9), b = make_random_inputs(s, 50, 9);
  CHECK(a.tokens == 50);
  CHECK(a.top_k == 4);
  CHECK(a.hidden == 64);
  REQUIRE(a.x.size() == 50u * 64);
  REQUIRE(a.topk_ids.size() == 200u);
  CHECK(a.x == b.x);
  CHECK(a.topk_ids == b.topk_ids);
  CHECK(a.topk_weights == b.topk_weights);
  double x2 = 0;
  for (uint16_t v : a.x) x2 += std::pow(bf16_to_float(v), 2);
  CHECK(std::sqrt(x2 / a.x.size()) == Approx(1.0).epsilon(0.1));
  for (int m = 0; m < 50; ++m) {
    double sum = 0;
    std::set<int> ids;
    for (int k = 0; k < 4; ++k) {
      const int id = a.topk_ids[m * 4 + k];
      CHECK(id >= 16);
      CHECK(id < 24);
      ids.insert(id);
      CHECK(a.topk_weights[m * 4 + k] > 0);
      sum += a.topk_weights[m * 4 + k];
    }
    CHECK(ids.size() == 4u);  // distinct, like a router's top-k
    CHECK(sum == Approx(1.0).epsilon(1e-6));
  }
  // With invalid ids: the range widens by one on each side and both ends occur.
  const HostInputs c = make_random_inputs(s, 200, 9, true);
  int below = 0, above = 0;
  for (int id : c.topk_ids) {
    CHECK(id >= 15);
    CHECK(id <= 24);
    below += id == 15;
    above += id == 24;
  }
  CHECK(below > 0);
  CHECK(above > 0);
  s.expert_begin = 0;
  const HostInputs d = make_random_inputs(s, 200, 1, true);
  int minus_one = 0;
  for (int id : d.topk_ids) minus_one += id == -1;
  CHECK(minus_one > 0);
  // Fewer local experts than top_k (expert parallelism): repeats are allowed.
  s.experts = 2;
  const HostInputs e = make_random_inputs(s, 10, 1);
  for (int id : e.topk_ids) CHECK((id == 0 || id == 1));
  CHECK(make_random_inputs(s, 0, 1).x.empty());
  CHECK_THROWS_AS(make_random_inputs(s, -1, 1), Error);
}

TEST_CASE("random code layers are valid, deterministic and use every code point", "[random]") {
  for (moejit::ScaleFormat f : {moejit::ScaleFormat::nvfp4, moejit::ScaleFormat::mxfp4}) {
    moejit::LayerSpec s;
    s.format = f;
    s.activation = moejit::Activation::swigluoai;
    s.experts = 4;
    s.hidden = 128;
    s.intermediate = 64;
    s.top_k = 2;
    s.has_bias = true;
    const moejit::HostLayer a = moejit::make_random_code_layer(s, 9), b = moejit::make_random_code_layer(s, 9);
    CHECK_NOTHROW(a.validate());
    CHECK(a.w13 == b.w13);
    CHECK(a.w2_scale == b.w2_scale);
    CHECK(a.w13 != moejit::make_random_code_layer(s, 10).w13);
    std::set<int> codes;
    for (uint8_t byte : a.w13) {
      codes.insert(byte & 0xF);
      codes.insert(byte >> 4);
    }
    CHECK(codes.size() == 16);
    // Dequantized weights have RMS ~ 1/sqrt(K): every element finite, the scale of the target.
    double sum = 0;
    for (int r = 0; r < s.fc1_rows(); ++r)
      for (int k = 0; k < s.hidden; ++k) {
        const double w = a.fc1_weight(0, r, k);
        REQUIRE(std::isfinite(w));
        sum += w * w;
      }
    const double rms = std::sqrt(sum / (s.fc1_rows() * s.hidden));
    CHECK(rms > 0.25 / std::sqrt(s.hidden));
    CHECK(rms < 4.0 / std::sqrt(s.hidden));
  }
}
