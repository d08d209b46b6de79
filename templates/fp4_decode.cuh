// FP4 (e2m1) weights and their block scales decoded to exact bf16 MMA operands in registers.
//
// Prepared layout (written by runtime prepare, see docs/LAYOUT.md): each lane of a warp owns one
// 16-byte run per (16-row slab, 64-wide K chunk): rows g and g+8 (g = lane/4) by 16 consecutive K
// (16*(lane%4) ..). Word s of the run holds the 8 nibbles that fill the four A-fragment registers of
// the k16-step s: nibble p (p<4) is the low element of register p, nibble p+4 its high element, so one
// shift per part places both halves of a bf16x2 at once.
#pragma once
#include "device_core.cuh"

// Nibble s e1 e0 m -> bf16 bits with e1 e0 m in exponent bits 8..7 and mantissa bit 6, sign at 15.
// That bit pattern is the e2m1 value times 2^-126 (e1e0 = 0 lands on the bf16 subnormal 0.5*2^-126
// exactly), so a multiply by 2^126 makes it exact.
template <int P>
MOEJIT_DEVICE u32 fp4_place(u32 w) {
  constexpr int kMagShift = 6 - 4 * P;   // nibble bits 4P..4P+2 -> 6..8
  constexpr int kSignShift = 12 - 4 * P; // nibble bit 4P+3 -> 15
  u32 mag = kMagShift >= 0 ? (w << kMagShift) : (w >> -kMagShift);
  u32 sign = w << kSignShift;
  return (mag & 0x01C001C0u) | (sign & 0x80008000u);
}

// Decodes one 32-bit word into the four A registers of a k16 step, scaled: a[0], a[2] belong to row g
// (scale sg = bf16x2 of that row's block scale), a[1], a[3] to row g+8 (scale sg8).
MOEJIT_DEVICE void fp4_decode_word(u32 w, u32 sg, u32 sg8, u32 (&a)[4]) {
  const u32 k2p126 = 0x7E807E80u;  // bf16x2(2^126, 2^126)
  a[0] = bf16x2_mul(bf16x2_mul(fp4_place<0>(w), k2p126), sg);
  a[1] = bf16x2_mul(bf16x2_mul(fp4_place<1>(w), k2p126), sg8);
  a[2] = bf16x2_mul(bf16x2_mul(fp4_place<2>(w), k2p126), sg);
  a[3] = bf16x2_mul(bf16x2_mul(fp4_place<3>(w), k2p126), sg8);
}

// e8m0 code -> bf16 bits: 2^(b-127); b = 0 is the bf16 subnormal 2^-127, b = 255 NaN.
MOEJIT_DEVICE u32 e8m0_to_bf16(u32 b) {
  if (b == 0u) return 0x0040u;
  if (b == 255u) return 0x7FC0u;
  return b << 7;
}

// e4m3fn code -> bf16 bits (every e4m3 value is exact in bf16).
MOEJIT_DEVICE u32 e4m3_to_bf16(u32 c) {
  u32 s = (c & 0x80u) << 8, e = (c >> 3) & 0xFu, m = c & 7u;
  if (e == 15u && m == 7u) return s | 0x7FC0u;                       // NaN
  if (e != 0u) return s | ((e + 120u) << 7) | (m << 4);             // normal
  return s | (__float_as_uint((float)m * 0.001953125f) >> 16);      // m/8 * 2^-6
}

// A packed pair of scale codes (row g in the low byte, row g+8 in the high byte) -> two bf16x2
// broadcast scales.
template <bool kNvfp4>
MOEJIT_DEVICE void decode_scale_pair(u32 packed, u32& sg, u32& sg8) {
  u32 lo = kNvfp4 ? e4m3_to_bf16(packed & 0xFFu) : e8m0_to_bf16(packed & 0xFFu);
  u32 hi = kNvfp4 ? e4m3_to_bf16((packed >> 8) & 0xFFu) : e8m0_to_bf16((packed >> 8) & 0xFFu);
  sg = lo | (lo << 16);
  sg8 = hi | (hi << 16);
}
