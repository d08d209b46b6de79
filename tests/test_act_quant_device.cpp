// The kernels' activation quantization arithmetic (templates/act_quant.cuh, compiled here for the host)
// against the fp64 reference's quantize_activations, bit for bit: the same fp32 block in, the same
// dequantized values out (a4: the kernel's operand e2m1 * s, divided by gs as the reference divides).
#include "catch_compat.hpp"

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "moejit/codecs.hpp"
#include "moejit/reference.hpp"
#include "templates/act_quant.cuh"

using namespace moejit;

namespace {

// The kernel's quantization of one block (the kernels reduce the block's |v| maximum over lanes as fp32
// bits, as here), as double values of the dequantized operand: a8 q * 2^X, a4 (q * s) / gs.
template <int kPrec>
std::vector<double> device_block(const std::vector<float>& v, float gs) {
  unsigned m = 0;
  for (float x : v) {
    const unsigned b = act_quant::aq_bits(x) & 0x7FFFFFFFu;
    m = b > m ? b : m;
  }
  std::vector<double> out(v.size());
  for (size_t j = 0; j < v.size(); ++j) {
    const float op = act_quant::act_quant_value<kPrec, 0>(v[j], m, gs);
    out[j] = kPrec == act_quant::kActA4 ? static_cast<double>(op) / static_cast<double>(gs) : static_cast<double>(op);
  }
  return out;
}

std::vector<double> reference_block(ActPrecision p, const std::vector<float>& v, float gs) {
  std::vector<double> d(v.begin(), v.end());
  quantize_activations(p, d.data(), static_cast<int64_t>(d.size()), gs);
  return d;
}

// Equal bit for bit (both NaN counts as equal; the sign of zero must match).
bool same(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b && std::signbit(a) == std::signbit(b);
}

template <int kPrec>
int64_t mismatches(ActPrecision p, const std::vector<float>& v, float gs, int block) {
  int64_t bad = 0;
  for (size_t b = 0; b < v.size(); b += block) {
    const std::vector<float> blk(v.begin() + b, v.begin() + std::min(v.size(), b + block));
    const auto d = device_block<kPrec>(blk, gs);
    const auto r = reference_block(p, blk, gs);
    for (size_t j = 0; j < blk.size(); ++j)
      if (!same(d[j], r[j])) {
        if (bad < 5) UNSCOPED_INFO("block " << b << " element " << j << " v " << blk[j] << " gs " << gs << ": kernel "
                                            << d[j] << " reference " << r[j]);
        ++bad;
      }
  }
  return bad;
}

float bf16_round(float v) { return bf16_to_float(float_to_bf16(v)); }

// Random rows of either kind the kernels quantize: bf16 values (x) or any fp32 value (the intermediate),
// over several decades, with whole blocks scaled apart so that block scales differ.
std::vector<float> random_row(std::mt19937& rng, int n, bool bf16, float spread) {
  std::normal_distribution<float> nd(0.f, 1.f);
  std::uniform_real_distribution<float> ud(-spread, spread);
  std::vector<float> v(n);
  float block_scale = 1.f;
  for (int j = 0; j < n; ++j) {
    if (j % 16 == 0) block_scale = std::exp2(ud(rng));
    const float x = nd(rng) * block_scale;
    v[j] = bf16 ? bf16_round(x) : x;
  }
  return v;
}

}  // namespace

TEST_CASE("kernel a8 quantization equals the reference bit for bit", "[actquant][device]") {
  std::mt19937 rng(39);
  int64_t checked = 0;
  for (int rep = 0; rep < 400; ++rep) {
    const bool bf16 = rep % 2 == 0;
    const auto v = random_row(rng, 256, bf16, rep % 4 < 2 ? 4.f : 40.f);
    CHECK(mismatches<act_quant::kActA8>(ActPrecision::a8, v, 1.f, 32) == 0);
    checked += 256;
  }
  // Short last block (K a multiple of 16 only), zeros, signed zeros, subnormal and huge blocks.
  std::vector<float> edge(48, 0.f);
  edge[1] = -0.f;
  edge[33] = 1e-40f;        // fp32 subnormal amax: X clamps to -127
  edge[40] = -3e-39f;
  CHECK(mismatches<act_quant::kActA8>(ActPrecision::a8, edge, 1.f, 32) == 0);
  std::vector<float> big(32, 0.f);
  big[0] = 3.0e38f;
  big[1] = -1.0e37f;
  big[2] = 511.f * 0.99f;  // amax in [448, 512) * 2^X: saturates at 448 * 2^X, as the floor rule implies
  CHECK(mismatches<act_quant::kActA8>(ActPrecision::a8, big, 1.f, 32) == 0);
  std::vector<float> sat(32, 1.f);
  sat[5] = 1.99f;  // X = -8: 1.99 * 256 = 509.4 saturates to 448
  CHECK(mismatches<act_quant::kActA8>(ActPrecision::a8, sat, 1.f, 32) == 0);
  CHECK(checked > 0);
}

TEST_CASE("kernel a4 quantization equals the reference bit for bit, ties included", "[actquant][device]") {
  std::mt19937 rng(4);
  std::uniform_real_distribution<float> log_gs(-6.f, 14.f);
  for (int rep = 0; rep < 600; ++rep) {
    const bool bf16 = rep % 2 == 0;
    const auto v = random_row(rng, 256, bf16, rep % 3 == 0 ? 2.f : 12.f);
    // Calibrated-like scales (2688 / amax), arbitrary ones, and powers of two (exact quotients: many ties).
    float amax = 0.f;
    for (float x : v) amax = std::max(amax, std::fabs(x));
    const float gs = rep % 3 == 0 ? 2688.f / amax : rep % 3 == 1 ? std::exp2(log_gs(rng)) : std::exp2(std::round(log_gs(rng)));
    CHECK(mismatches<act_quant::kActA4>(ActPrecision::a4, v, gs, 16) == 0);
  }
  // Hand-made ties: gs = 1 and amax 6 give s = 1, so v itself is the e2m1 quotient: 0.25 -> 0, 0.75 -> 1,
  // 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4, and 7 (above 6) saturates.
  const std::vector<float> ties{6.f, 0.25f, 0.75f, 1.25f, 1.75f, 2.5f, 3.5f, 5.f, -5.f, -0.25f, -0.f, 0.f,
                                0.125f, 4.5f, 5.5f, 1.f};
  CHECK(mismatches<act_quant::kActA4>(ActPrecision::a4, ties, 1.f, 16) == 0);
  // Block scale ties: amax * gs / 6 on an e4m3 midpoint (4.25 between 4 and 4.5, 4.75 between 4.5 and 5,
  // 0.75 * 2^-9 between subnormals), near and past 448, and far past it.
  for (float amax : {6.f * 4.25f, 6.f * 4.75f, 6.f * 0.00146484375f, 6.f * 432.f, 6.f * 440.f, 6.f * 460.f, 1e30f}) {
    std::vector<float> b(16, 0.f);
    b[0] = amax;
    b[3] = -amax * 0.3f;
    b[7] = amax * 0.71f;
    CHECK(mismatches<act_quant::kActA4>(ActPrecision::a4, b, 1.f, 16) == 0);
  }
  // A block whose scale rounds to zero becomes signed zeros; a non-finite block becomes NaN.
  std::vector<float> tiny(16, 1e-8f);
  tiny[2] = -1e-8f;
  CHECK(mismatches<act_quant::kActA4>(ActPrecision::a4, tiny, 1.f, 16) == 0);
  std::vector<float> nan(16, 1.f);
  nan[9] = std::numeric_limits<float>::quiet_NaN();
  CHECK(mismatches<act_quant::kActA4>(ActPrecision::a4, nan, 3.f, 16) == 0);
  nan[9] = -std::numeric_limits<float>::infinity();
  CHECK(mismatches<act_quant::kActA4>(ActPrecision::a4, nan, 3.f, 16) == 0);
  CHECK(mismatches<act_quant::kActA8>(ActPrecision::a8, std::vector<float>(nan.begin(), nan.end()), 1.f, 32) == 0);
}

TEST_CASE("kernel a4 operands are exact in bf16, with and without the decode operand scaling", "[actquant][device]") {
  // Every e2m1 x e4m3 product (the operand before 1/gs) and every e4m3 x 2^X, times 2^64, is a bf16 value.
  for (int s = 0; s < 0x7F; ++s)
    for (int q = 0; q < 8; ++q) {
      const float e2 = e2m1_to_float(static_cast<uint8_t>(q));
      const float e4 = e4m3_to_float(static_cast<uint8_t>(s));
      const float op = e2 * e4 * 1.8446744073709552e19f;
      REQUIRE(bf16_round(op) == op);
    }
  for (int code = 0; code < 0x7F; ++code)
    for (int x : {-127, -60, 0, 55}) {
      const float op = e4m3_to_float(static_cast<uint8_t>(code)) * act_quant::aq_pow2(x + 64);
      REQUIRE(bf16_round(op) == op);
    }
}
