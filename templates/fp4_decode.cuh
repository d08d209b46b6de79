// FP4 (e2m1) weights decoded to exact bf16 MMA operands in registers, and their block scales to fp32.
//
// Prepared layout (written by prepare_repack.cuh, see docs/LAYOUT.md): each lane of a warp owns one
// 16-byte run per (16-row slab, 64-wide K chunk): rows g and g+8 (g = lane/4). Word s of the run feeds
// k16-step s, which covers K 16s..16s+15 of the chunk (one NVFP4 scale block, half an MXFP4 one); the
// lane's four K values in that step are 16s + 4*(lane%4) + 0..3. Inside the word, nibble p (p < 4) is
// the low element of A register p and nibble p+4 its high element, so one shift per part places both
// halves of a bf16x2 at once.
#pragma once
#include "device_core.cuh"

// Nibble s e1 e0 m -> bf16 bits with e1 e0 m in exponent bits 8..7 and mantissa bit 6, sign at 15:
// exactly the e2m1 value times 2^-126 (e1 e0 = 0 lands on the bf16 subnormal 0.5 * 2^-126). No
// multiply follows: the activations are pre-scaled by 2^64 (kActScale) and the fp32 accumulators by
// 2^62 with the block scale, so the tensor cores see normal-range products.
template <int P>
MOEJIT_DEVICE u32 fp4_place(u32 w) {
  constexpr int kMagShift = 6 - 4 * P;   // nibble bits 4P..4P+2 -> 6..8
  constexpr int kSignShift = 12 - 4 * P; // nibble bit 4P+3 -> 15
  const u32 mag = kMagShift >= 0 ? (w << kMagShift) : (w >> -kMagShift);
  const u32 sign = w << kSignShift;
  return (mag & 0x01C001C0u) | (sign & 0x80008000u);
}

MOEJIT_DEVICE void fp4_decode_word(u32 w, u32 (&a)[4]) {
  a[0] = fp4_place<0>(w);
  a[1] = fp4_place<1>(w);
  a[2] = fp4_place<2>(w);
  a[3] = fp4_place<3>(w);
}

// bf16x2(2^64, 2^64): activations are multiplied by it (exact for |x| < 2^64) so that products with
// the 2^-126-scaled weights land at x * w * 2^-62, inside fp32's normal range for |x * w| >= 2^-64.
inline constexpr u32 kActScaleBf16x2 = 0x5F805F80u;
// The accumulator correction for the two scalings above.
inline constexpr float kAccScale = 4.611686018427388e18f;  // 2^62

// e8m0 code b -> 2^(b-127) * 2^62 in fp32 (b = 255 NaN; scales above 2^65 saturate to infinity).
MOEJIT_DEVICE float e8m0_to_f32_times_2p62(u32 b) {
  const u32 biased = b + 62u;
  float v = __uint_as_float(biased << 23);
  v = biased >= 255u ? __uint_as_float(0x7F800000u) : v;
  return b == 255u ? __uint_as_float(0x7FC00000u) : v;
}

// Block scale of rows (g, g+8) for k16-step `step` of a chunk, as fp32 multipliers of the MMA result.
// NVFP4: `packed` is 8 bytes (row g blocks 0..3, row g+8 blocks 0..3); the 2^62 correction is applied
// with the global scale at the end. MXFP4: 4 bytes (row g blocks 0..1, row g+8 blocks 0..1), with
// the 2^62 folded in here.
template <bool kNvfp4>
MOEJIT_DEVICE void step_scales(u32x2 packed, int step, float& sg, float& sg8) {
  if (kNvfp4) {
    // One conversion turns the (row g, row g+8) codes of this step into f16x2 (exact: every e4m3
    // value is an f16 value), then each half widens to fp32.
    const u32 pair = ((packed.x >> (8 * step)) & 0xFFu) | (((packed.y >> (8 * step)) & 0xFFu) << 8);
    u32 h2;
    asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(h2) : "h"((u16)pair));
    asm("{.reg .f16 lo, hi;\n mov.b32 {lo, hi}, %2;\n cvt.f32.f16 %0, lo;\n cvt.f32.f16 %1, hi;}"
        : "=f"(sg), "=f"(sg8) : "r"(h2));
  } else {
    const int block = step >> 1;
    sg = e8m0_to_f32_times_2p62((packed.x >> (8 * block)) & 0xFFu);
    sg8 = e8m0_to_f32_times_2p62((packed.x >> (16 + 8 * block)) & 0xFFu);
  }
}
