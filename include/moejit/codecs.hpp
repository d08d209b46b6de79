#pragma once
// Bit-exact number formats of DESIGN §2. Decoders are exact; encoders round to nearest even and
// saturate to the largest finite value (e2m1: 6, e4m3: 448); NaN inputs encode to NaN where the format
// has one (e4m3 0x7F, e8m0 0xFF) and to +-6 for e2m1 (which has none).
#include <cstdint>

namespace moejit {

float e2m1_to_float(uint8_t nibble);  // low 4 bits used: s e1 e0 m
uint8_t float_to_e2m1(float v);       // returns a nibble (0..15)
// Same rounding from a double, without first rounding to float (which could turn a value just below
// a rounding midpoint into the midpoint). Used by the quantizers, which divide in double.
uint8_t double_to_e2m1(double v);
float e4m3_to_float(uint8_t code);    // e4m3fn: bias 7, no inf, 0x7F/0xFF NaN
uint8_t float_to_e4m3(float v);
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
