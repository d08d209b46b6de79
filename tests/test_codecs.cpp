// Bit-exact number formats (DESIGN §2) and the vocabulary names of types.hpp.
//
// Expected values are derived here independently of the codecs (tables written out by hand, or
// built by walking the format's grid), never by calling the function under test.
#include <bit>
#include "catch_compat.hpp"
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>

#include "moejit/codecs.hpp"
#include "moejit/error.hpp"
#include "moejit/types.hpp"

using namespace moejit;

namespace {
const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

bool same_float(float a, float b) { return std::bit_cast<uint32_t>(a) == std::bit_cast<uint32_t>(b); }
}  // namespace

// ------------------------------------------------------------------------------------------- e2m1

TEST_CASE("e2m1: every code decodes to its value and re-encodes to itself", "[codecs][e2m1]") {
  // nibble s e1 e0 m: magnitudes 0, .5, 1, 1.5, 2, 3, 4, 6; sign bit 3. 0x8 is -0 and stays -0.
  const float expected[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                              -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  for (int c = 0; c < 16; ++c) {
    INFO("code " << c);
    CHECK(same_float(e2m1_to_float(static_cast<uint8_t>(c)), expected[c]));
    CHECK(float_to_e2m1(expected[c]) == c);
    CHECK(double_to_e2m1(expected[c]) == c);
  }
  // Only the low nibble is read.
  CHECK(e2m1_to_float(0xF7) == 6.0f);
}

TEST_CASE("e2m1: round to nearest even at every midpoint", "[codecs][e2m1]") {
  // Midpoint -> the neighbour whose code is even (mantissa bit 0).
  CHECK(float_to_e2m1(0.25f) == 0);  // 0 | 0.5   -> 0   (code 0)
  CHECK(float_to_e2m1(0.75f) == 2);  // 0.5 | 1   -> 1   (code 2)
  CHECK(float_to_e2m1(1.25f) == 2);  // 1 | 1.5   -> 1   (code 2)
  CHECK(float_to_e2m1(1.75f) == 4);  // 1.5 | 2   -> 2   (code 4)
  CHECK(float_to_e2m1(2.5f) == 4);   // 2 | 3     -> 2   (code 4)
  CHECK(float_to_e2m1(3.5f) == 6);   // 3 | 4     -> 4   (code 6)
  CHECK(float_to_e2m1(5.0f) == 6);   // 4 | 6     -> 4   (code 6)
  CHECK(float_to_e2m1(-5.0f) == 0xE);
  CHECK(float_to_e2m1(-0.25f) == 0x8);  // rounds to -0, sign kept
  // Just off the midpoints.
  CHECK(float_to_e2m1(std::nextafter(0.25f, 1.0f)) == 1);
  CHECK(float_to_e2m1(std::nextafter(0.75f, 0.0f)) == 1);
  CHECK(float_to_e2m1(std::nextafter(1.25f, 2.0f)) == 3);
  CHECK(float_to_e2m1(std::nextafter(1.75f, 0.0f)) == 3);
  CHECK(float_to_e2m1(std::nextafter(2.5f, 3.0f)) == 5);
  CHECK(float_to_e2m1(std::nextafter(3.5f, 0.0f)) == 5);
  CHECK(float_to_e2m1(std::nextafter(5.0f, 6.0f)) == 7);
  CHECK(float_to_e2m1(0.1f) == 0);
  CHECK(float_to_e2m1(-0.1f) == 0x8);
  CHECK(float_to_e2m1(-0.0f) == 0x8);
  // The double encoder decides on the true value: 0.25 + 1e-12 is above the midpoint, though as a
  // float it would round to the midpoint itself and then to 0.
  CHECK(double_to_e2m1(0.25 + 1e-12) == 1);
  CHECK(float_to_e2m1(static_cast<float>(0.25 + 1e-12)) == 0);
  CHECK(double_to_e2m1(5.0 - 1e-12) == 6);
}

TEST_CASE("e2m1: saturation and NaN", "[codecs][e2m1]") {
  CHECK(float_to_e2m1(6.0f) == 7);
  CHECK(float_to_e2m1(6.9f) == 7);
  CHECK(float_to_e2m1(7.0f) == 7);
  CHECK(float_to_e2m1(1e30f) == 7);
  CHECK(float_to_e2m1(kInf) == 7);
  CHECK(float_to_e2m1(-kInf) == 0xF);
  CHECK(float_to_e2m1(-100.0f) == 0xF);
  // No NaN in e2m1: NaN becomes the largest magnitude, keeping its sign bit.
  CHECK(float_to_e2m1(kNaN) == 7);
  CHECK(float_to_e2m1(-kNaN) == 0xF);
}

TEST_CASE("fp4_nibble reads element 2j from the low nibble of byte j", "[codecs][e2m1]") {
  const uint8_t row[2] = {0x21, 0xF7};
  CHECK(fp4_nibble(row, 0) == 0x1);
  CHECK(fp4_nibble(row, 1) == 0x2);
  CHECK(fp4_nibble(row, 2) == 0x7);
  CHECK(fp4_nibble(row, 3) == 0xF);
}

// ------------------------------------------------------------------------------------------- e4m3

namespace {
// The 127 non-negative e4m3fn values in code order, built by walking the grid: subnormals step 2^-9
// from 0; from 2^-6 on, each binade of 8 codes doubles the step of the previous one. No formula of
// the codec is reused.
std::vector<double> e4m3_grid() {
  std::vector<double> v{0.0};
  double step = 1.0 / 512;
  for (int c = 1; c <= 0x7E; ++c) {
    v.push_back(v.back() + step);
    if (c >= 16 && c % 8 == 0) step *= 2;  // code c opened a new binade: twice the spacing
  }
  return v;
}
}  // namespace

TEST_CASE("e4m3: the grid matches hand-computed landmarks", "[codecs][e4m3]") {
  const auto g = e4m3_grid();
  REQUIRE(g.size() == 127);
  CHECK(g[0x01] == 1.0 / 512);    // smallest subnormal 2^-9
  CHECK(g[0x07] == 7.0 / 512);    // largest subnormal 7/8 * 2^-6
  CHECK(g[0x08] == 1.0 / 64);     // smallest normal 2^-6
  CHECK(g[0x0F] == 15.0 / 512);   // 1.875 * 2^-6
  CHECK(g[0x10] == 1.0 / 32);     // 2^-5
  CHECK(g[0x11] == 18.0 / 512);   // 1.125 * 2^-5
  CHECK(g[0x38] == 1.0);          // exponent 7 = bias
  CHECK(g[0x39] == 1.125);
  CHECK(g[0x40] == 2.0);
  CHECK(g[0x77] == 240.0);        // 1.875 * 2^7
  CHECK(g[0x78] == 256.0);
  CHECK(g[0x7E] == 448.0);        // 1.75 * 2^8, the maximum
}

TEST_CASE("e4m3: all 256 codes decode and re-encode", "[codecs][e4m3]") {
  const auto g = e4m3_grid();
  for (int c = 0; c < 256; ++c) {
    INFO("code 0x" << std::hex << c);
    const uint8_t code = static_cast<uint8_t>(c);
    const float v = e4m3_to_float(code);
    if ((c & 0x7F) == 0x7F) {
      CHECK(std::isnan(v));
      CHECK(float_to_e4m3(v) == 0x7F);  // NaN encodes to the canonical 0x7F whatever its sign
      continue;
    }
    const double mag = g[c & 0x7F];
    CHECK(same_float(v, static_cast<float>((c & 0x80) ? -mag : mag)));  // 0x80 is -0.0
    CHECK(float_to_e4m3(v) == code);                                   // -0 stays 0x80
  }
}

TEST_CASE("e4m3: round to nearest even, subnormals, saturation", "[codecs][e4m3]") {
  // Normal midpoints: 1.0625 between 1.0 (0x38, even) and 1.125 (0x39) -> 1.0.
  CHECK(float_to_e4m3(1.0625f) == 0x38);
  CHECK(float_to_e4m3(1.1875f) == 0x3A);  // 1.125 | 1.25 -> 1.25 (0x3A, even)
  CHECK(float_to_e4m3(std::nextafter(1.0625f, 2.0f)) == 0x39);
  CHECK(float_to_e4m3(248.0f) == 0x78);   // 240 (0x77) | 256 (0x78): carry into the next binade
  CHECK(float_to_e4m3(-248.0f) == 0xF8);
  CHECK(float_to_e4m3(15.5f / 512) == 0x10);  // 15/512 | 16/512: carry from binade -6 into -5
  // Subnormal midpoints, step 2^-9.
  CHECK(float_to_e4m3(0.5f / 512) == 0x00);   // 0 | 2^-9 -> 0
  CHECK(float_to_e4m3(std::nextafter(0.5f / 512, 1.0f)) == 0x01);
  CHECK(float_to_e4m3(1.5f / 512) == 0x02);   // 1 | 2 -> 2
  CHECK(float_to_e4m3(2.5f / 512) == 0x02);   // 2 | 3 -> 2
  CHECK(float_to_e4m3(7.5f / 512) == 0x08);   // 7/512 | 8/512 -> the smallest normal
  CHECK(float_to_e4m3(1e-10f) == 0x00);
  CHECK(float_to_e4m3(-1e-10f) == 0x80);
  // Saturation to 448, never NaN or infinity.
  CHECK(float_to_e4m3(448.0f) == 0x7E);
  CHECK(float_to_e4m3(449.0f) == 0x7E);
  CHECK(float_to_e4m3(464.0f) == 0x7E);
  CHECK(float_to_e4m3(1e6f) == 0x7E);
  CHECK(float_to_e4m3(kInf) == 0x7E);
  CHECK(float_to_e4m3(-kInf) == 0xFE);
  CHECK(float_to_e4m3(-1e6f) == 0xFE);
  CHECK(float_to_e4m3(kNaN) == 0x7F);
  CHECK(float_to_e4m3(-kNaN) == 0x7F);
}

TEST_CASE("e4m3: random values round to a nearest grid neighbour", "[codecs][e4m3]") {
  const auto g = e4m3_grid();
  std::mt19937_64 rng(3);
  std::uniform_real_distribution<double> logu(-12, 9);
  for (int i = 0; i < 20000; ++i) {
    const float v = static_cast<float>(std::exp2(logu(rng)));
    const double r = e4m3_to_float(float_to_e4m3(v));
    double best = std::numeric_limits<double>::infinity();
    for (double x : g) best = std::min(best, std::fabs(x - std::min<double>(v, 448)));
    INFO("v = " << v);
    REQUIRE(std::fabs(r - std::min<double>(v, 448)) == best);
  }
}

// ------------------------------------------------------------------------------------------- e8m0

TEST_CASE("e8m0: all 256 codes decode to 2^(b-127) and re-encode", "[codecs][e8m0]") {
  // Walk powers of two from 2^-127 by doubling (exact in double).
  double p = std::ldexp(1.0, -127);
  for (int c = 0; c < 255; ++c, p *= 2) {
    INFO("code " << c);
    const float v = e8m0_to_float(static_cast<uint8_t>(c));
    CHECK(static_cast<double>(v) == p);
    CHECK(e8m0_ceil(v) == c);
  }
  CHECK(e8m0_to_float(127) == 1.0f);
  CHECK(e8m0_to_float(0) == std::ldexp(1.0f, -127));  // a float subnormal, still exact
  CHECK(e8m0_to_float(254) == std::ldexp(1.0f, 127));
  CHECK(std::isnan(e8m0_to_float(255)));
}

TEST_CASE("e8m0_ceil: smallest power of two >= v", "[codecs][e8m0]") {
  CHECK(e8m0_ceil(1.0f) == 127);
  CHECK(e8m0_ceil(std::nextafter(1.0f, 2.0f)) == 128);
  CHECK(e8m0_ceil(std::nextafter(1.0f, 0.0f)) == 127);
  CHECK(e8m0_ceil(0.75f) == 127);
  CHECK(e8m0_ceil(3.0f) == 129);
  CHECK(e8m0_ceil(0.5f) == 126);
  CHECK(e8m0_ceil(6.0f / 6.0f) == 127);
  for (int c = 0; c < 254; ++c) {
    const float p = std::ldexp(1.0f, c - 127);
    INFO("code " << c);
    CHECK(e8m0_ceil(std::nextafter(p, kInf)) == c + 1);
  }
  CHECK(e8m0_ceil(1e-45f) == 0);                             // below 2^-127: the smallest scale
  CHECK(e8m0_ceil(std::numeric_limits<float>::max()) == 254);  // 2^128 does not exist: saturate
  CHECK(e8m0_ceil(kInf) == 254);
  CHECK(e8m0_ceil(0.0f) == 0);
  CHECK(e8m0_ceil(-1.0f) == 0);
  CHECK(e8m0_ceil(kNaN) == 0xFF);
}

// ------------------------------------------------------------------------------------------- bf16

TEST_CASE("bf16: every bit pattern round-trips through float", "[codecs][bf16]") {
  for (uint32_t b = 0; b < 0x10000; ++b) {
    const uint16_t bits = static_cast<uint16_t>(b);
    const float f = bf16_to_float(bits);
    CHECK(std::bit_cast<uint32_t>(f) == (b << 16));
    if (std::isnan(f)) {
      // NaN stays NaN (a signalling pattern gets the quiet bit; sign kept).
      const uint16_t r = float_to_bf16(f);
      CHECK(std::isnan(bf16_to_float(r)));
      CHECK((r & 0x8000) == (bits & 0x8000));
      CHECK(std::isnan(bf16_to_float(double_to_bf16(f))));
    } else {
      CHECK(float_to_bf16(f) == bits);
      CHECK(double_to_bf16(f) == bits);
    }
  }
}

TEST_CASE("bf16: round to nearest even from fp32 and fp64", "[codecs][bf16]") {
  // 1 + 2^-8 is halfway between 1.0 (0x3F80, even) and 1 + 2^-7 (0x3F81).
  CHECK(float_to_bf16(1.0f + 0x1p-8f) == 0x3F80);
  CHECK(float_to_bf16(1.0f + 0x1p-8f + 0x1p-23f) == 0x3F81);
  CHECK(float_to_bf16(1.0f + 3 * 0x1p-8f) == 0x3F82);  // 0x3F81 | 0x3F82 -> 0x3F82 (even)
  CHECK(float_to_bf16(-(1.0f + 0x1p-8f)) == 0xBF80);
  CHECK(float_to_bf16(1.0f + 0x1p-8f - 0x1p-23f) == 0x3F80);
  // Carry through the mantissa into the exponent: 2 - 2^-9 -> 2.0.
  CHECK(float_to_bf16(2.0f - 0x1p-9f) == 0x4000);
  // Subnormals round the same way.
  CHECK(float_to_bf16(std::bit_cast<float>(0x00008000u)) == 0x0000);
  CHECK(float_to_bf16(std::bit_cast<float>(0x00018000u)) == 0x0002);
  // Overflow: the largest floats round to infinity (IEEE RNE), infinity stays infinity.
  CHECK(float_to_bf16(std::numeric_limits<float>::max()) == 0x7F80);
  CHECK(float_to_bf16(kInf) == 0x7F80);
  CHECK(float_to_bf16(-kInf) == 0xFF80);
  CHECK(float_to_bf16(0.0f) == 0x0000);
  CHECK(float_to_bf16(-0.0f) == 0x8000);
  // NaN, including payloads that truncation would turn into infinity.
  CHECK(std::isnan(bf16_to_float(float_to_bf16(kNaN))));
  CHECK(std::isnan(bf16_to_float(float_to_bf16(std::bit_cast<float>(0x7F800001u)))));
  CHECK(std::isnan(bf16_to_float(float_to_bf16(std::bit_cast<float>(0xFF800001u)))));
  CHECK(float_to_bf16(-kNaN) >> 15 == 1);
  CHECK(round_bf16(1.0f + 0x1p-8f) == 1.0f);
  // fp64: one rounding. 1 + 2^-8 + 2^-40 is above the midpoint (-> 0x3F81); rounding it to fp32
  // first lands exactly on the midpoint, which then goes to even (0x3F80): double rounding.
  CHECK(double_to_bf16(1.0 + 0x1p-8 + 0x1p-40) == 0x3F81);
  CHECK(float_to_bf16(static_cast<float>(1.0 + 0x1p-8 + 0x1p-40)) == 0x3F80);
  CHECK(double_to_bf16(1.0 + 0x1p-8) == 0x3F80);
  CHECK(double_to_bf16(1e300) == 0x7F80);
  CHECK(double_to_bf16(-1e300) == 0xFF80);
  CHECK(double_to_bf16(1e-300) == 0x0000);
  CHECK(double_to_bf16(-0.0) == 0x8000);
  CHECK(std::isnan(bf16_to_float(double_to_bf16(std::numeric_limits<double>::quiet_NaN()))));
}

TEST_CASE("bf16: double and float encoders agree on random floats", "[codecs][bf16]") {
  std::mt19937 rng(11);
  for (int i = 0; i < 200000; ++i) {
    const float f = std::bit_cast<float>(static_cast<uint32_t>(rng()));
    if (std::isnan(f)) continue;
    INFO("bits 0x" << std::hex << std::bit_cast<uint32_t>(f));
    REQUIRE(float_to_bf16(f) == double_to_bf16(f));
  }
}

// ------------------------------------------------------------------------------------------- names

TEST_CASE("enum names round-trip and bad names are clear errors", "[types]") {
  for (auto v : {ScaleFormat::nvfp4, ScaleFormat::mxfp4}) CHECK(parse_scale_format(to_string(v)) == v);
  for (auto v : {Activation::silu, Activation::gelu_tanh, Activation::relu2, Activation::swigluoai})
    CHECK(parse_activation(to_string(v)) == v);
  for (auto v : {ActPrecision::a16, ActPrecision::a8, ActPrecision::a4}) CHECK(parse_act_precision(to_string(v)) == v);
  for (auto v : {GateUpOrder::gate_up, GateUpOrder::up_gate, GateUpOrder::interleaved})
    CHECK(parse_gate_up_order(to_string(v)) == v);
  for (auto v : {Arch::sm_90a, Arch::sm_100a, Arch::sm_120a}) CHECK(parse_arch(to_string(v)) == v);
  CHECK(to_string(ScaleFormat::nvfp4) == "nvfp4");
  CHECK(to_string(Activation::gelu_tanh) == "gelu_tanh");
  CHECK(to_string(GateUpOrder::interleaved) == "interleaved");
  CHECK(to_string(Arch::sm_120a) == "sm_120a");
  CHECK(arch_cc(Arch::sm_90a) == 90);
  CHECK(arch_cc(Arch::sm_100a) == 100);
  CHECK(arch_cc(Arch::sm_120a) == 120);

  using Catch::Contains;
  CHECK_THROWS_WITH(parse_scale_format("fp4"), Contains("format") && Contains("fp4") && Contains("nvfp4, mxfp4"));
  CHECK_THROWS_WITH(parse_activation("gelu"),
                    Contains("activation") && Contains("silu, gelu_tanh, relu2, swigluoai"));
  CHECK_THROWS_WITH(parse_act_precision("a32"), Contains("precision") && Contains("a16, a8, a4"));
  CHECK_THROWS_WITH(parse_gate_up_order("gateup"), Contains("gate_up_order") && Contains("interleaved"));
  CHECK_THROWS_WITH(parse_arch("sm_90"), Contains("arch") && Contains("sm_90a, sm_100a, sm_120a"));
  CHECK_THROWS_AS(parse_arch(""), Error);
  CHECK_THROWS_AS(parse_scale_format("NVFP4"), Error);  // names are case-sensitive
}
