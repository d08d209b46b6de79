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

// e8m0 code -> bf16 bits: 2^(b-127); b = 0 is the bf16 subnormal 2^-127, b = 255 NaN. Branch-free.
MOEJIT_DEVICE u32 e8m0_to_bf16(u32 b) {
  u32 r = b << 7;
  r = b == 0u ? 0x0040u : r;
  return b == 255u ? 0x7FC0u : r;
}

// e4m3fn code -> fp32, branch-free and exact: the 7 magnitude bits placed at fp32 bits 26..20 read as
// 2^(e-127) * 1.mmm (or the fp32 subnormal m/8 * 2^-126 when e = 0), and * 2^120 rebiases both cases
// exactly (no flush: moejit never compiles with fast math). The NaN code 0x7F would read as 480, so
// it is mapped to NaN explicitly.
MOEJIT_DEVICE float e4m3_to_f32(u32 c) {
  float mag = __uint_as_float((c & 0x7Fu) << 20) * 1.329227995784916e36f;  // 2^120
  mag = (c & 0x7Fu) == 0x7Fu ? __uint_as_float(0x7FC00000u) : mag;
  return __uint_as_float(__float_as_uint(mag) | ((c & 0x80u) << 24));
}

// A packed pair of scale codes (row g in the low byte, row g+8 in the high byte) -> two bf16x2
// broadcast scales (every e4m3 and e8m0 value is exact in bf16).
template <bool kNvfp4>
MOEJIT_DEVICE void decode_scale_pair(u32 packed, u32& sg, u32& sg8) {
  if (kNvfp4) {
    const float lo = e4m3_to_f32(packed & 0xFFu), hi = e4m3_to_f32((packed >> 8) & 0xFFu);
    sg = pack_bf16x2(lo, lo);
    sg8 = pack_bf16x2(hi, hi);
  } else {
    const u32 lo = e8m0_to_bf16(packed & 0xFFu), hi = e8m0_to_bf16((packed >> 8) & 0xFFu);
    sg = lo | (lo << 16);
    sg8 = hi | (hi << 16);
  }
}
