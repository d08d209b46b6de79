// Activation quantization of the a8 (MXFP8) and a4 (NVFP4) precision modes on the GPU, with the rules of
// the fp64 reference (reference/activation_quant.cpp, docs/DECISIONS.md "Precision"). The kernels keep
// bf16 tensor-core operands: a quantized value is an e4m3 value times a power of two (a8) or an e2m1
// value times an e4m3 scale (a4), both exact in bf16, so the operand is the dequantized value itself.
// a4's 1/gs is not applied to the operand (it would not be exact); the kernels fold it into their fp32
// output multiplier instead.
//
// The scalar arithmetic below compiles for the host too (tests/test_act_quant_device.cpp checks it bit
// for bit against the reference); the warp-level block reductions are device-only.
//
// Exactness: a8 divides by a power of two (exact). a4's two roundings are of exact quotients
// (amax * gs / 6 and v * gs / s), as the reference's, both settled by fmaf's single rounding of
// a*b - m*d (m*d exact: at most 7 significant bits), which gives the sign of the exact comparison with a
// grid midpoint m and so the rounding and its ties: for the block scale an fp32 estimate of the quotient
// (a few ulp off: the device's fast reciprocal divide, the host's multiply by a reciprocal) picks an e4m3
// grid point within one step and its two neighbouring midpoints decide; for the e2m1 value the estimate's
// grid interval and its one midpoint decide. The device takes the e4m3 grid from the conversion instructions.
#pragma once

#if defined(__CUDACC__)
#include "device_core.cuh"
#define MOEJIT_AQ_FN __device__ __forceinline__
#define MOEJIT_AQ_NS_BEGIN
#define MOEJIT_AQ_NS_END
#else
#include <cmath>
#include <cstdint>
#include <cstring>
#define MOEJIT_AQ_FN inline
#define MOEJIT_AQ_NS_BEGIN namespace moejit::act_quant {
#define MOEJIT_AQ_NS_END }
#endif

MOEJIT_AQ_NS_BEGIN

#if defined(__CUDACC__)
MOEJIT_AQ_FN unsigned aq_bits(float v) { return __float_as_uint(v); }
MOEJIT_AQ_FN float aq_float(unsigned b) { return __uint_as_float(b); }
MOEJIT_AQ_FN float aq_rint(float v) { return rintf(v); }
MOEJIT_AQ_FN float aq_floor(float v) { return floorf(v); }
MOEJIT_AQ_FN float aq_fma(float a, float b, float c) { return fmaf(a, b, c); }
// x / y to within a few ulp (y a normal number below 2^126): the division's estimate only has to pick a
// grid point within one step; the exact comparisons settle the rest, with fewer registers than the IEEE
// division's slow path takes.
MOEJIT_AQ_FN float aq_div_estimate(float x, float y) { return __fdividef(x, y); }
// 1 / y to within an ulp (y a normal number or 0, which gives infinity): the hardware's approximation.
MOEJIT_AQ_FN float aq_rcp_estimate(float y) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(y));
  return r;
}
#else
MOEJIT_AQ_FN unsigned aq_bits(float v) {
  std::uint32_t b;
  std::memcpy(&b, &v, 4);
  return b;
}
MOEJIT_AQ_FN float aq_float(unsigned b) {
  float v;
  std::uint32_t u = b;
  std::memcpy(&v, &u, 4);
  return v;
}
MOEJIT_AQ_FN float aq_rint(float v) { return std::nearbyint(v); }  // the default mode: nearest even
MOEJIT_AQ_FN float aq_floor(float v) { return std::floor(v); }
MOEJIT_AQ_FN float aq_fma(float a, float b, float c) { return std::fma(a, b, c); }
// Inexact on purpose, like the device's: the host tests check that the exact comparisons absorb it.
MOEJIT_AQ_FN float aq_div_estimate(float x, float y) { return x * (1.f / y); }
MOEJIT_AQ_FN float aq_rcp_estimate(float y) { return 1.f / y; }
#endif

// The precision modes as the generated source passes them (MOEJIT_ACT_PRECISION).
constexpr int kActA16 = 0, kActA8 = 1, kActA4 = 2;

// floor(log2(a)) for a > 0 normal; -127 for zero and fp32 subnormals (callers clamp from below).
MOEJIT_AQ_FN int aq_floor_log2(float a) { return (int)((aq_bits(a) >> 23) & 0xFFu) - 127; }
// 2^n for n in [-149, 127].
MOEJIT_AQ_FN float aq_pow2(int n) { return n >= -126 ? aq_float((unsigned)(n + 127) << 23) : aq_float(1u << (n + 149)); }
// Non-finite: the fp32 bits of |v| at or above infinity's.
MOEJIT_AQ_FN bool aq_nonfinite_bits(unsigned abs_bits) { return abs_bits >= 0x7F800000u; }

// A saturating floating-point grid: e4m3 (min exponent -6, 3 mantissa bits, max 448).
struct AqE4m3 {
  static constexpr int kMinExp = -6, kMant = 3;
  static constexpr float kMax = 448.f;
};

// Spacing of the grid at r (r >= 0 on the grid, or any a >= 0 for the spacing of its binade).
template <class G>
MOEJIT_AQ_FN float aq_quantum(float r) {
  const int e = aq_floor_log2(r) > G::kMinExp ? aq_floor_log2(r) : G::kMinExp;
  return aq_pow2(e - G::kMant);
}
#if defined(__CUDACC__)
// The e4m3 conversion instructions (sm_89 and later). aq_e4m3_code: the code of 0 <= a < 448, nearest,
// ties to even, subnormals kept, the grid point aq_grid_round<AqE4m3> picks; aq_e4m3_values: the values
// of the codes in the low and high byte of `codes` (exact in f16, so in fp32).
MOEJIT_AQ_FN unsigned aq_e4m3_code(float a) {
  unsigned short code;
  asm("cvt.rn.satfinite.e4m3x2.f32 %0, %1, %2;" : "=h"(code) : "f"(0.f), "f"(a));
  return code;
}
MOEJIT_AQ_FN void aq_e4m3_values(unsigned codes, float& low, float& high) {
  unsigned halves;
  asm("cvt.rn.f16x2.e4m3x2 %0, %1;" : "=r"(halves) : "h"((unsigned short)codes));
  asm("cvt.f32.f16 %0, %1;" : "=f"(low) : "h"((unsigned short)(halves & 0xFFFFu)));
  asm("cvt.f32.f16 %0, %1;" : "=f"(high) : "h"((unsigned short)(halves >> 16)));
}
MOEJIT_AQ_FN float aq_e4m3_round_instruction(float a) {
  float r, unused;
  aq_e4m3_values(aq_e4m3_code(a), r, unused);
  return r;
}
#endif

// Nearest grid point of a >= 0 (ties to even), saturating at G::kMax (infinity too).
template <class G>
MOEJIT_AQ_FN float aq_grid_round(float a) {
  if (!(a < G::kMax)) return G::kMax;
#if defined(__CUDACC__)
  if constexpr (G::kMinExp == -6 && G::kMant == 3) return aq_e4m3_round_instruction(a);
#endif
  const int e = aq_floor_log2(a) > G::kMinExp ? aq_floor_log2(a) : G::kMinExp;
  const float r = aq_rint(a * aq_pow2(G::kMant - e)) * aq_pow2(e - G::kMant);
  return r < G::kMax ? r : G::kMax;
}
// Whether grid point r >= 0 has an even code (mantissa bit 0): r / quantum is even.
template <class G>
MOEJIT_AQ_FN bool aq_grid_even(float r) {
  return (((int)(r * aq_pow2(G::kMant - (aq_floor_log2(r) > G::kMinExp ? aq_floor_log2(r) : G::kMinExp)))) & 1) == 0;
}
// The grid point below r > 0 on the grid: half a step when r opens a binade above the subnormal range.
template <class G>
MOEJIT_AQ_FN float aq_grid_pred(float r) {
  const float q = aq_quantum<G>(r);
  const bool binade_start = (aq_bits(r) & 0x7FFFFFu) == 0 && aq_floor_log2(r) > G::kMinExp;
  return r - (binade_start ? 0.5f * q : q);
}

// The nearest grid point r of a >= 0 (as aq_grid_round), whether grid points lie below it (r > 0) and
// above it (r < G::kMax), those points lo and hi, and whether r's code is odd. The device reads the e4m3
// grid from the conversion instructions: r's code c and the codes c - 1 and c + 1 (binade edges and
// subnormals included); r's parity is c's.
struct AqGridPoint {
  float lo, r, hi;
  bool below, above, odd;
};
template <class G>
MOEJIT_AQ_FN AqGridPoint aq_grid_point(float a) {
#if defined(__CUDACC__)
  if constexpr (G::kMinExp == -6 && G::kMant == 3) {
    const unsigned c = a < G::kMax ? aq_e4m3_code(a) : 0x7Eu;  // 0x7E: 448
    AqGridPoint p;
    float unused;
    aq_e4m3_values((c > 0 ? c - 1 : 0) | c << 8, p.lo, p.r);
    aq_e4m3_values(c < 0x7Eu ? c + 1 : c, p.hi, unused);
    p.below = c > 0;
    p.above = c < 0x7Eu;
    p.odd = c & 1u;
    return p;
  }
#endif
  const float r = aq_grid_round<G>(a);
  const bool below = r > 0.f, above = r < G::kMax;
  return AqGridPoint{below ? aq_grid_pred<G>(r) : r, r, above ? r + aq_quantum<G>(r) : r, below, above, !aq_grid_even<G>(r)};
}

// Nearest grid point (ties to even, saturating at G::kMax) of the exact a * b / d, for finite a, b >= 0
// and d > 0 such that every midpoint m of the grid gives an exact m * d.
template <class G>
MOEJIT_AQ_FN float aq_round_ratio(float a, float b, float d) {
  const AqGridPoint p = aq_grid_point<G>(aq_div_estimate(a * b, d));  // within one grid step of the exact result
  if (p.below) {
    const float c = aq_fma(a, b, -(0.5f * (p.lo + p.r)) * d);  // sign of a*b - midpoint*d, exactly
    if (c < 0.f || (c == 0.f && p.odd)) return p.lo;
  }
  if (p.above) {
    const float c = aq_fma(a, b, -(0.5f * (p.r + p.hi)) * d);
    if (c > 0.f || (c == 0.f && p.odd)) return p.hi;
  }
  return p.r;
}

// a8: the block's shared exponent X = floor(log2(amax)) - 8, clamped to e8m0's range, from the block's
// largest |v| given as fp32 bits (finite: at most 119). A zero or fp32-subnormal maximum gives -127, the
// clamp of the true value (every element of such a block stays what 2^127 times it rounds to).
MOEJIT_AQ_FN int a8_block_exponent(unsigned amax_bits) {
  const int x = (int)(amax_bits >> 23) - 135;  // the biased exponent minus 127 + 8
  return x < -127 ? -127 : x;
}
// a4: the block scale s = e4m3(amax * gs / 6) from the block's largest |v| (finite) and the global scale.
MOEJIT_AQ_FN float a4_block_scale(unsigned amax_bits, float gs) {
  return aq_round_ratio<AqE4m3>(aq_float(amax_bits), gs, 6.f);
}
// e2m1 (0, 0.5, 1, 1.5, 2, 3, 4, 6; nearest, ties to the even code, saturating at 6) of the exact a * b / d
// (a, b >= 0 finite, d > 0 an e4m3 value), given an estimate q of the quotient a few ulp off. q lies in the
// grid interval [lo, lo + step) of the exact quotient, or next to a grid point that the exact one lies just
// past; either way only the midpoint m = lo + step / 2 of q's interval can separate q's rounding from the
// exact one, and fmaf's single rounding of a * b - m * d gives the sign of the exact comparison (m * d is
// exact: at most 3 significant bits times 4). A tie goes to the even code: up from lo = 0.5, 1.5 and 3 (odd
// codes 1, 3, 5), the odd values of lo / step. Branch-free (selects only); q = infinity or NaN (d = 0, which
// a4_value's multiply by d = 0 then makes 0) gives 6.
MOEJIT_AQ_FN float aq_e2m1_from_estimate(float q, float a, float b, float d) {
  const bool below2 = q < 2.f, below4 = q < 4.f;
  const float step = below2 ? 0.5f : below4 ? 1.f : 2.f;
  const float index = aq_floor(q * (below2 ? 2.f : below4 ? 1.f : 0.5f));  // exact: step is a power of two
  const float lo = index * step;
  const float c = aq_fma(a, b, -(lo + 0.5f * step) * d);
  // c > 0, or c == 0 (+0: an exact difference) with an odd index: as integers, c's bits are positive for
  // c > 0, 0 for +0 and negative below, so adding the index's last bit (index < 2^23: it lands in bit 0 of
  // index + 2^23) makes the tie count as above.
  const int odd = (int)(aq_bits(index + 8388608.f) & 1u);
  const bool up = (int)aq_bits(c) + odd > 0;
  const float r = up ? lo + step : lo;
  return lo < 6.f ? r : 6.f;  // q >= 6: the exact quotient is above the last midpoint, 5
}

// a4: e2m1(v * gs / s) * s * 2^shift, the operand without the 1/gs (folded into the output multiplier), given
// the block's k = gs / s estimate (a4_ratio_factor; infinity for s = 0, whose values are 0).
MOEJIT_AQ_FN float a4_ratio_factor(float gs, float s) { return gs * aq_rcp_estimate(s); }
template <int kShift>
MOEJIT_AQ_FN float a4_value(float v, float gs, float s, float k) {
  const float a = aq_float(aq_bits(v) & 0x7FFFFFFFu);  // |v|, +0 for -0 (the sign is put back below)
  const float r = aq_e2m1_from_estimate(a * k, a, gs, s) * s * aq_pow2(kShift);
  return (aq_bits(v) >> 31) ? -r : r;
}

// A block's quantizer, from the block's |v| maximum as fp32 bits and the global scale (a4): its parameters
// are computed once and each element then takes a few instructions (a kernel lane holds several elements of
// a block). q(v): the quantized operand value times 2^kShift (a4 without the 1/gs), NaN for a block holding
// a NaN or an infinity; a16: v * 2^kShift. Selects rather than branches, so that a block's parameters stay
// shared by its elements.
//   a8: e4m3(v / 2^X) * 2^(X + kShift), X = a8_block_exponent (v / 2^X is exact: a power of two).
//   a4: e2m1(v * gs / s) * s * 2^kShift, s = a4_block_scale.
template <int kPrec, int kShift>
struct ActBlockQuant {
  bool bad;        // the block holds a NaN or an infinity
  float down, up;  // a8: 2^-X and 2^(X + kShift)
  float gs, s, k;  // a4: the global scale, the block scale and the gs / s estimate

  MOEJIT_AQ_FN ActBlockQuant(unsigned amax_bits, float global)
      : bad(aq_nonfinite_bits(amax_bits)), down(0.f), up(0.f), gs(global), s(0.f), k(0.f) {
    const unsigned finite = bad ? 0u : amax_bits;
    if (kPrec == kActA8) {
      const int x = a8_block_exponent(finite);  // <= 119 for a finite maximum: 2^-x is normal
      down = aq_pow2(-x);
      up = aq_pow2(x + kShift);
    } else if (kPrec == kActA4) {
      s = a4_block_scale(finite, gs);
      k = a4_ratio_factor(gs, s);
    }
  }
  // a4 from a block scale already computed (a4_column_block_scales; NaN for a non-finite block).
  MOEJIT_AQ_FN static ActBlockQuant from_a4_scale(float scale, float global) {
    ActBlockQuant q(0u, global);
    q.bad = scale != scale;
    q.s = scale;
    q.k = a4_ratio_factor(global, scale);
    return q;
  }
  MOEJIT_AQ_FN float operator()(float v) const {
    if (kPrec == kActA16) return v * aq_pow2(kShift);
    float q;
    if (kPrec == kActA8) {
#if defined(__CUDACC__)
      // The conversion rounds the signed quotient (e4m3 is sign and magnitude, its rounding symmetric) and
      // saturates at 448 as the grid does: the same value and sign, -0 included.
      q = aq_e4m3_round_instruction(v * down) * up;
#else
      const float r = aq_grid_round<AqE4m3>(aq_float(aq_bits(v) & 0x7FFFFFFFu) * down) * up;  // of |v|
      q = (aq_bits(v) >> 31) ? -r : r;
#endif
    } else {
      q = a4_value<kShift>(v, gs, s, k);
    }
    return bad ? aq_float(0x7FC00000u) : q;
  }
};

// One element of a block given the block's |v| maximum as fp32 bits (ActBlockQuant for one element).
template <int kPrec, int kShift>
MOEJIT_AQ_FN float act_quant_value(float v, unsigned amax_bits, float gs) {
  return ActBlockQuant<kPrec, kShift>(amax_bits, gs)(v);
}

MOEJIT_AQ_NS_END

#if defined(__CUDACC__)
#include "routing_params.cuh"  // fc1_x_row
// The key's activation precision, passed by the generator (one kernel per translation unit): a16 when
// unset.
#ifndef MOEJIT_ACT_PRECISION
#define MOEJIT_ACT_PRECISION 0
#endif
inline constexpr int kActPrecision = MOEJIT_ACT_PRECISION;
static_assert(kActPrecision >= kActA16 && kActPrecision <= kActA4, "precision is a16, a8 or a4");
// a4: the layer's local expert count (the generator passes it with a4 keys), which places the activation
// scales in the FCs' fp32 scale planes.
#ifndef MOEJIT_ACT_EXPERTS
#define MOEJIT_ACT_EXPERTS 0
#endif
inline constexpr int kActExperts = MOEJIT_ACT_EXPERTS;
static_assert(kActPrecision != kActA4 || kActExperts > 0, "a4 keys pass the expert count");

// a4's global input scales ride in the FCs' fp32 scale planes (`gscale`), after the weights' global scales,
// so the kernel parameter structs keep their size (a larger FC1 struct changes the a16 kernels' code):
// FC1's plane is [E][mats] weight scales (ones for MXFP4), then a1_gs [E], then a2_gs [E]; FC2's is [E]
// weight scales, then a2_gs [E] (runtime/families/prepare.cpp builds them). Unused outside a4.
template <int kMats>
MOEJIT_DEVICE float act_fc1_x_gs(const float* gscale, int e) {
  return kActPrecision == kActA4 ? gscale[kMats * kActExperts + e] : 1.f;
}
template <int kMats>
MOEJIT_DEVICE float act_fc1_out_gs(const float* gscale, int e) {
  return kActPrecision == kActA4 ? gscale[(kMats + 1) * kActExperts + e] : 1.f;
}
MOEJIT_DEVICE float act_fc2_gs(const float* gscale, int e) { return kActPrecision == kActA4 ? gscale[kActExperts + e] : 1.f; }
// The fp32 multiplier that a4 folds into an FC's output: 1/gs of its activation operand (1 otherwise).
MOEJIT_DEVICE float act_unscale(float gs) { return kActPrecision == kActA4 ? 1.f / gs : 1.f; }

// FC1's operand row of routed pair q: a16 reads the token's row of the layer input x; a8/a4 read the row
// that the act_quant pre-pass wrote (moe_act_quant.cuh: x quantized once per token, or once per pair where
// a4's a1_gs differs between experts; the operand values without a4's 1/gs, which FC1 folds into its output
// multiplier), so FC1's loop is a16's.
template <int kH>
MOEJIT_DEVICE const u16* fc1_x_row(const u16* x, int q, const RoutingArgs& r) {
  return x + (size_t)(kActPrecision == kActA16 || r.x_per_token ? q / r.top_k : q) * kH;
}

// Elements per scale block along K.
template <int kPrec>
inline constexpr int kActBlock = kPrec == kActA8 ? 32 : kPrec == kActA4 ? 16 : 1;

// The |v| maximum (as fp32 bits, NaN and infinity above every finite value) over the lanes whose ids
// differ only in the bits of kLaneMask (a block spread over those lanes), from each lane's own maximum.
// Every lane of the warp must call it.
template <int kLaneMask>
MOEJIT_DEVICE unsigned block_amax_bits(unsigned local) {
#pragma unroll
  for (int b = 1; b < 32; b <<= 1)
    if (kLaneMask & b) {
      const unsigned o = __shfl_xor_sync(0xffffffffu, local, b);
      local = o > local ? o : local;
    }
  return local;
}
// a4's block scales of kNT x 2 columns whose 16-row blocks lie over the 8 lanes of one lane % 4 (the MMA
// accumulator layout: column nt * 8 + 2 * (lane & 3) + c, rows g and g + 8 in lane g * 4 + lane % 4), from
// each lane's own maxima (fp32 bits of |v|): scale[nt][c], NaN for a block holding a NaN or an infinity.
// The 8 lanes of a column group share the work instead of each computing every scale: a reduce-scatter of the
// maxima over lane bits 4, 3, 2 (each step keeps the half of the columns whose index bit matches the lane's and
// takes the partner's maxima of it) leaves lane g the maxima of columns j = nt * 2 + c with j % 8 == g, it
// computes those scales, and a shuffle brings each to the lanes of its column. Every lane of the warp calls it.
template <int kNT>
MOEJIT_DEVICE void a4_column_block_scales(const unsigned (&local)[kNT][2], float gs, float (&scale)[kNT][2]) {
  constexpr int kCols = kNT * 2, kPer = (kCols + 7) / 8;
  const int lane = lane_id();
  unsigned a[kPer][8];
#pragma unroll
  for (int k = 0; k < kPer; ++k)
#pragma unroll
    for (int r = 0; r < 8; ++r) {
      const int j = 8 * k + r;
      a[k][r] = j < kCols ? local[j >> 1][j & 1] : 0u;
    }
#pragma unroll
  for (int step = 0; step < 3; ++step) {
    const int half = 4 >> step;
    const bool upper = (lane >> (4 - step)) & 1;
#pragma unroll
    for (int k = 0; k < kPer; ++k)
#pragma unroll
      for (int r = 0; r < half; ++r) {
        const unsigned keep = upper ? a[k][r + half] : a[k][r], send = upper ? a[k][r] : a[k][r + half];
        const unsigned got = __shfl_xor_sync(0xffffffffu, send, 16 >> step);
        a[k][r] = got > keep ? got : keep;
      }
  }
  float mine[kPer];
#pragma unroll
  for (int k = 0; k < kPer; ++k) {
    const bool bad = aq_nonfinite_bits(a[k][0]);
    const float s = a4_block_scale(bad ? 0u : a[k][0], gs);
    mine[k] = bad ? aq_float(0x7FC00000u) : s;
  }
#pragma unroll
  for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
    for (int c = 0; c < 2; ++c) {
      const int j = nt * 2 + c;
      scale[nt][c] = __shfl_sync(0xffffffffu, mine[j >> 3], ((j & 7) << 2) | (lane & 3));
    }
}
// Whether a warp's columns take a4_column_block_scales: with fewer than 8 columns per lane group the shared
// work saves less than its shuffles cost.
template <int kNT>
inline constexpr bool kA4SharedScales = kActPrecision == kActA4 && kNT >= 4;

MOEJIT_DEVICE unsigned abs_bits_bf16x2_max(u32 v) {
  const unsigned lo = (v & 0x7FFFu) << 16, hi = v & 0x7FFF0000u;
  return lo > hi ? lo : hi;
}
MOEJIT_DEVICE float bf16_lo(u32 v) { return __uint_as_float(v << 16); }
MOEJIT_DEVICE float bf16_hi(u32 v) { return __uint_as_float(v & 0xFFFF0000u); }
MOEJIT_DEVICE u32 pack_bf16x2(float lo, float hi) { return (u32)f32_to_bf16(lo) | ((u32)f32_to_bf16(hi) << 16); }

// Quantizes kN pieces of 4 bf16 layer-input values (one k16 step's share of a lane each) that together
// with the same pieces of the lanes in kLaneMask form whole scale blocks: the pieces become the operand
// values times 2^kShift as bf16 (a16: just the multiply). Every lane of the warp must call it.
template <int kPrec, int kShift, int kLaneMask, int kN>
MOEJIT_DEVICE void quantize_pieces(u32x2 (&v)[kN], float gs) {
  unsigned m = 0;
#pragma unroll
  for (int i = 0; i < kN; ++i) {
    const unsigned a = abs_bits_bf16x2_max(v[i].x), b = abs_bits_bf16x2_max(v[i].y);
    m = a > m ? a : m;
    m = b > m ? b : m;
  }
  if (kPrec != kActA16) m = block_amax_bits<kLaneMask>(m);
  const ActBlockQuant<kPrec, kShift> q(m, gs);
#pragma unroll
  for (int i = 0; i < kN; ++i) {
    v[i].x = pack_bf16x2(q(bf16_lo(v[i].x)), q(bf16_hi(v[i].x)));
    v[i].y = pack_bf16x2(q(bf16_lo(v[i].y)), q(bf16_hi(v[i].y)));
  }
}

#endif
