#pragma once
// Bit-exact number formats of DESIGN §2. Decoders are exact; encoders round to nearest even and
// saturate to the largest finite value (e2m1: 6, e4m3: 448); NaN inputs encode to NaN where the format
// has one (e4m3 0x7F, e8m0 0xFF) and to +-6 for e2m1 (which has none).
#include <cmath>
#include <cstdint>

namespace moejit {

float e2m1_to_float(uint8_t nibble);  // low 4 bits used: s e1 e0 m
uint8_t float_to_e2m1(float v);       // returns a nibble (0..15)
// Same rounding from a double, without first rounding to float (which could turn a value just below
// a rounding midpoint into the midpoint). Used by the quantizers, which divide in double; inline and
// branch-free because it runs once per weight when a multi-GB layer is quantized.
inline uint8_t double_to_e2m1(double v) {
  const double a = v < 0 ? -v : v;
  // Count the midpoints below |v|; ties go to the even code (mantissa bit 0), hence > or >=:
  //   0.25 -> 0, 0.75 -> 1, 1.25 -> 1, 1.75 -> 2, 2.5 -> 2, 3.5 -> 4, 5 -> 4; above 5 saturates to 6.
  int code = (a > 0.25) + (a >= 0.75) + (a > 1.25) + (a >= 1.75) + (a > 2.5) + (a >= 3.5) + (a > 5.0);
  if (std::isnan(a)) code = 7;  // NaN: no code in e2m1; the largest magnitude with the NaN's sign
  // The sign is kept even when the magnitude rounds to 0: -0 (0x8) is a valid code.
  return static_cast<uint8_t>((std::signbit(v) ? 0x8 : 0x0) | code);
}
float e4m3_to_float(uint8_t code);    // e4m3fn: bias 7, no inf, 0x7F/0xFF NaN
uint8_t float_to_e4m3(float v);
uint8_t double_to_e4m3(double v);     // the same rounding from a double (one rounding, as double_to_e2m1)
float e8m0_to_float(uint8_t code);    // 2^(code-127), 0xFF NaN
// Smallest e8m0 code whose value is >= v (v > 0): the scale that keeps v/scale within range.
uint8_t e8m0_ceil(float v);
float bf16_to_float(uint16_t bits);
uint16_t float_to_bf16(float v);  // round to nearest even; NaN stays NaN
// One correct rounding from double (no intermediate fp32 rounding): how the fp64 reference rounds.
uint16_t double_to_bf16(double v);
inline float round_bf16(float v) { return bf16_to_float(float_to_bf16(v)); }

// Element j of a packed FP4 row (element 2i in the low nibble of byte i).
inline uint8_t fp4_nibble(const uint8_t* row, int64_t j) {
  return static_cast<uint8_t>((row[j >> 1] >> ((j & 1) * 4)) & 0xF);
}

}  // namespace moejit
