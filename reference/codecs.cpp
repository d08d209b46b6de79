// Bit-exact codecs of DESIGN §2: e2m1 (FP4), e4m3fn (FP8), e8m0 (power-of-two scales) and bf16.
//
// Decoders are table- or formula-exact. Encoders work in double, where every value of these formats
// and every midpoint between two neighbours is exact, so the round-to-nearest-even decision is made
// on the true value and does not depend on the floating-point environment (no rint/nearbyint).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>

#include "moejit/codecs.hpp"

namespace moejit {
namespace {

// Round a non-negative double to the nearest integer, ties to even. The inputs here are exact
// multiples of a power of two, so the tie test is exact.
double round_half_even(double x) {
  const double fl = std::floor(x);
  const double frac = x - fl;
  if (frac > 0.5) return fl + 1.0;
  if (frac < 0.5) return fl;
  return std::fmod(fl, 2.0) == 0.0 ? fl : fl + 1.0;
}

// Magnitudes of the e2m1 codes 0..7 (sign is bit 3).
constexpr float kE2m1[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

}  // namespace

// ---------------------------------------------------------------- e2m1 (FP4)

float e2m1_to_float(uint8_t nibble) {
  const float mag = kE2m1[nibble & 0x7];
  return (nibble & 0x8) ? -mag : mag;
}

// double_to_e2m1 is inline in codecs.hpp (the quantizers' inner loop).
uint8_t float_to_e2m1(float v) { return double_to_e2m1(static_cast<double>(v)); }

// ---------------------------------------------------------------- e4m3fn (FP8)

float e4m3_to_float(uint8_t code) {
  const int exp = (code >> 3) & 0xF;
  const int man = code & 0x7;
  if (exp == 0xF && man == 0x7) return std::numeric_limits<float>::quiet_NaN();  // 0x7F / 0xFF
  float mag = exp == 0 ? std::ldexp(static_cast<float>(man), -9)                 // m/8 * 2^-6
                       : std::ldexp(static_cast<float>(8 + man), exp - 10);      // (1+m/8) * 2^(e-7)
  return (code & 0x80) ? -mag : mag;
}

uint8_t float_to_e4m3(float v) { return double_to_e4m3(static_cast<double>(v)); }

uint8_t double_to_e4m3(double v) {
  // NaN -> 0x7F (the canonical NaN, whatever the input's sign), so a NaN never becomes a number.
  if (std::isnan(v)) return 0x7F;
  const uint8_t sign = std::signbit(v) ? 0x80 : 0x00;
  const double a = std::fabs(v);  // infinity saturates below like any large value
  if (a == 0.0) return sign;
  int e2;
  std::frexp(a, &e2);  // a = f * 2^e2, f in [0.5, 1): unbiased exponent E = e2 - 1
  // The quantum (spacing) of the binade, 2^(E-3); subnormals share the binade-(-6) quantum 2^-9.
  const int quantum_exp = std::max(e2 - 1, -6) - 3;
  if (!std::isfinite(a) || a >= 448.0) return sign | 0x7E;  // saturate (no infinity in e4m3fn)
  const double q = round_half_even(std::ldexp(a, -quantum_exp));
  // For normals q is in [8, 16]: code = (biased exp << 3) + (q - 8), and q == 16 carries into the
  // exponent naturally. For subnormals q is in [0, 8] and q == 8 is the smallest normal (code 0x08).
  int code = quantum_exp == -9 ? static_cast<int>(q) : ((quantum_exp + 3 + 7) << 3) + static_cast<int>(q) - 8;
  if (code > 0x7E) code = 0x7E;  // values in (448, 464] round past 448 towards the NaN code: saturate
  return sign | static_cast<uint8_t>(code);
}

// ---------------------------------------------------------------- e8m0 (scales)

float e8m0_to_float(uint8_t code) {
  if (code == 0xFF) return std::numeric_limits<float>::quiet_NaN();
  // 2^-127 (code 0) is a float subnormal and still exact.
  return std::ldexp(1.0f, static_cast<int>(code) - 127);
}

uint8_t e8m0_ceil(float v) {
  if (std::isnan(v)) return 0xFF;
  // Non-positive inputs have no "power of two >= v" other than the smallest: any scale keeps 0 at 0.
  if (!(v > 0.0f)) return 0;
  if (std::isinf(v)) return 254;
  int e2;
  const double f = std::frexp(static_cast<double>(v), &e2);  // v = f * 2^e2, f in [0.5, 1)
  // An exact power of two (f == 0.5) is its own ceiling 2^(e2-1); anything else rounds up to 2^e2.
  const int exp = f == 0.5 ? e2 - 1 : e2;
  const int code = exp + 127;
  if (code < 0) return 0;
  if (code > 254) return 254;  // 2^127 is the largest finite scale
  return static_cast<uint8_t>(code);
}

// ---------------------------------------------------------------- bf16

float bf16_to_float(uint16_t bits) {
  const uint32_t u = static_cast<uint32_t>(bits) << 16;
  return std::bit_cast<float>(u);
}

uint16_t float_to_bf16(float v) {
  const uint32_t u = std::bit_cast<uint32_t>(v);
  // NaN: keep sign and payload's top bits, force the quiet bit so truncation cannot produce infinity.
  if ((u & 0x7FFFFFFFu) > 0x7F800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);
  // Round to nearest even on the 16 dropped bits; a carry into the exponent is the correct result
  // (including rounding the largest finite floats up to infinity, as IEEE RNE does).
  const uint32_t rounding = 0x7FFFu + ((u >> 16) & 1u);
  return static_cast<uint16_t>((u + rounding) >> 16);
}

uint16_t double_to_bf16(double v) {
  if (std::isnan(v)) return std::signbit(v) ? 0xFFC0 : 0x7FC0;
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0x0000;
  const double a = std::fabs(v);
  if (a == 0.0) return sign;
  if (std::isinf(a)) return sign | 0x7F80;
  int e2;
  std::frexp(a, &e2);
  // bf16 has fp32's exponent range and 8 significant bits: quantum 2^(E-7), subnormals below 2^-126.
  const int quantum_exp = std::max(e2 - 1, -126) - 7;
  const double r = std::ldexp(round_half_even(std::ldexp(a, -quantum_exp)), quantum_exp);
  if (r >= 0x1p128) return sign | 0x7F80;  // overflow rounds to infinity (RNE, like float_to_bf16)
  // r is a bf16 value, hence exact in float, whose low 16 bits are zero.
  return sign | static_cast<uint16_t>(std::bit_cast<uint32_t>(static_cast<float>(r)) >> 16);
}

}  // namespace moejit
