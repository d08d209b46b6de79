#pragma once
// Bit-exact number formats of DESIGN §2. Decoders are exact; encoders round to nearest even and
// saturate to the largest finite value (e2m1: 6, e4m3: 448); NaN inputs encode to NaN where the format
// has one (e4m3 0x7F, e8m0 0xFF) and to +-6 for e2m1 (which has none).
// Every function here is pure (no state, thread-safe) and never throws.
#include <cmath>
#include <cstdint>

namespace moejit {

// e2m1 (FP4): nibble s e1 e0 m, magnitudes 0, 0.5, 1, 1.5, 2, 3, 4, 6. Only the low 4 bits of `nibble`
// are read.
float e2m1_to_float(uint8_t nibble);
// Nearest e2m1 code of v (ties to even, saturating at +-6); returns a nibble (0..15).
uint8_t float_to_e2m1(float v);
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
// e4m3fn (FP8): bias 7, subnormals m/8 * 2^-6, max 448, no infinity, 0x7F/0xFF NaN.
float e4m3_to_float(uint8_t code);
// Nearest e4m3 code of v (ties to even; |v| > 448 and infinities saturate to +-448; NaN -> 0x7F/0xFF).
uint8_t float_to_e4m3(float v);
uint8_t double_to_e4m3(double v);     // the same rounding from a double (one rounding, as double_to_e2m1)
// e8m0 (MXFP scale): 2^(code - 127); code 0xFF is NaN.
float e8m0_to_float(uint8_t code);
// Smallest e8m0 code whose value is >= v (v > 0 and finite): the scale that keeps v/scale within
// range. v <= 0 gives code 0 (2^-127), v above 2^127 or infinite 254 (2^127), NaN 0xFF.
uint8_t e8m0_ceil(float v);
// bf16 as its 16 bits (the upper half of an fp32): exact widening.
float bf16_to_float(uint16_t bits);
uint16_t float_to_bf16(float v);  // round to nearest even; NaN stays NaN
// One correct rounding from double (no intermediate fp32 rounding): how the fp64 reference rounds.
uint16_t double_to_bf16(double v);
inline float round_bf16(float v) { return bf16_to_float(float_to_bf16(v)); }

// Element j (>= 0) of a packed FP4 row (element 2i in the low nibble of byte i, 2i+1 in the high one);
// the caller keeps j within the row (row[j / 2] is read unchecked).
inline uint8_t fp4_nibble(const uint8_t* row, int64_t j) {
  return static_cast<uint8_t>((row[j >> 1] >> ((j & 1) * 4)) & 0xF);
}

}  // namespace moejit
