// FP4 (e2m1) weights decoded to exact bf16 MMA operands in registers, and their block scales to fp32.
//
// Prepared layout (written by prepare_repack.cuh, see docs/WEIGHT_LAYOUT.md): each lane of a warp owns one
// 16-byte run per (16-row slab, 64-wide K chunk): rows g and g+8 (g = lane/4). Word s of the run feeds
// k16-step s, which covers K 16s..16s+15 of the chunk (one NVFP4 scale block, half an MXFP4 one); the
// lane's four K values in that step are 16s + 4*(lane%4) + 0..3. The 32 bits of a word are the 8
// nibbles' bits scattered (by prepare) so that the four A registers come out of 9 integer operations:
// no placement of whole nibbles allows fewer than 2 operations per register (see fp4_bit_source).
#pragma once
#include "device_core.cuh"

// A register p, half h (element h of the bf16x2), bit i of the e2m1 code (0 m, 1 e0, 2 e1, 3 sign):
// the bit of the prepared word it comes from. Each code lands as bf16 bits with e1 e0 m in exponent
// bits 8..7 and mantissa bit 6, sign at 15 (+16 for the high half): exactly the e2m1 value times
// 2^-126 (e1 e0 = 0 lands on the bf16 subnormal 0.5 * 2^-126). Register 0 is the word masked,
// register 1 the word rotated left by 4, register 2 by 10, register 3 takes its mantissa, low exponent
// and sign bits from the word shifted left by 6 and its high exponent bit from the word rotated by 14.
// The table is the inverse of those moves; prepare_repack.cuh scatters codes with it.
MOEJIT_DEVICE int fp4_bit_source(int p, int h, int i) {
  // Destination bit of code bit i in a bf16x2 half: 6, 7, 8 (magnitude), 15 (sign).
  const int dst = (i == 3 ? 15 : 6 + i) + 16 * h;
  int move;  // left rotation applied to the word for this destination
  if (p == 0) move = 0;
  else if (p == 1) move = 4;
  else if (p == 2) move = 10;
  else move = (i == 2) ? 14 : 6;
  return (dst - move + 32) & 31;
}

template <int kBits>
MOEJIT_DEVICE u32 rotl(u32 w) {
  u32 r;
  asm("shf.l.wrap.b32 %0, %1, %1, %2;" : "=r"(r) : "r"(w), "n"(kBits));
  return r;
}

// Bits of a bf16x2 that hold a placed code: magnitude 6..8 and sign 15 of each half.
inline constexpr u32 kPlacedMask = 0x81C081C0u;

MOEJIT_DEVICE void fp4_decode_word(u32 w, u32 (&a)[4]) {
  a[0] = w & kPlacedMask;
  a[1] = (w << 4) & kPlacedMask;  // the bits register 1 needs never wrap around
  a[2] = rotl<10>(w) & kPlacedMask;
  a[3] = ((w << 6) & 0x80C080C0u) | (rotl<14>(w) & 0x01000100u);
}

// bf16x2(2^64, 2^64): activations are multiplied by it (exact for |x| < 2^64) so that products with
// the 2^-126-scaled weights land at x * w * 2^-62, inside fp32's normal range for |x * w| >= 2^-64.
// FC1 stores its output already multiplied, so FC2 reads it as is.
inline constexpr u32 kActScaleBf16x2 = 0x5F805F80u;
inline constexpr float kActScale = 1.8446744073709552e19f;  // 2^64
// The accumulator correction for the two scalings above, applied once with the global scale.
inline constexpr float kAccScale = 4.611686018427388e18f;  // 2^62

// Block scales of rows (g, g+8) for one scale block of a chunk, as fp32 multipliers of the MMA
// result. Prepared scale bytes pair the two rows of each block: byte 2b + h is row g + 8h, block b.
// NVFP4: `packed` holds 4 blocks (8 bytes); one conversion turns a block's pair into f16x2 (every
// e4m3 value is an f16 value), then each half widens to fp32. MXFP4: `packed.x` holds 2 blocks; an
// e8m0 code b becomes the fp32 bits b << 23 = 2^(b-127) (code 0 becomes 0 instead of 2^-127 and code
// 255 infinity instead of NaN: both far outside trained weights, see docs/WEIGHT_LAYOUT.md).
template <bool kNvfp4>
MOEJIT_DEVICE void block_scales(u32x2 packed, int block, float& sg, float& sg8) {
  if (kNvfp4) {
    const u32 word = block < 2 ? packed.x : packed.y;
    const u16 pair = (u16)(word >> (16 * (block & 1)));
    u32 h2;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"(pair));
    asm("{.reg .f16 lo, hi;\n mov.b32 {lo, hi}, %2;\n cvt.f32.f16 %0, lo;\n cvt.f32.f16 %1, hi;}"
        : "=f"(sg), "=f"(sg8) : "r"(h2));
  } else {
    const u32 sel_g = 0x4440u + 2 * block, sel_g8 = 0x4441u + 2 * block;  // byte -> low byte, rest 0
    u32 bg, bg8;
    asm("prmt.b32 %0, %1, 0, %2;" : "=r"(bg) : "r"(packed.x), "r"(sel_g));
    asm("prmt.b32 %0, %1, 0, %2;" : "=r"(bg8) : "r"(packed.x), "r"(sel_g8));
    sg = __uint_as_float(bg << 23);
    sg8 = __uint_as_float(bg8 << 23);
  }
}
