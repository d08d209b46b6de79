// The act_quant pre-pass of the a8 and a4 precisions (decode and batch families): the layer input
// quantized once per routed pair, before FC1, as DESIGN §1 quantizes it (act_quant.cuh, bit for bit the
// reference's rules), into one row per pair that FC1 then reads as the a16 kernels read x.
//
// Why a pass of its own: an FC1 CTA reads the whole input row of each of its pairs against a 16-row slab of
// weights, so quantizing where FC1 loads x repeats the quantization for every slab (and, in the register-fed
// MMAs, for every lane group of a column), and the exact a4 rounding costs tens of instructions per value
// against about one per decoded weight. Here each value is quantized once. Per pair, not per token: a4's
// global scale a1_gs may differ between experts (ModelOpt gives one per expert).
//
// Thread i takes k16 block i % B of pair i / B's row (B = H/16 rounded up to even for a8): its 16 values
// are a4's scale block; a8's 32-value block is the k16 blocks of two neighbouring lanes, whose maxima meet
// by one shuffle (a short last a8 block of H % 32 == 16 has a lane with nothing, contributing 0). Rows of
// pairs routed to another rank's experts are not written (FC1 reads local pairs only). The values written
// are the operands (a4 without 1/gs, which FC1 folds into its output multiplier).
#pragma once
#include "act_quant.cuh"
#include "moe_act_quant_params.cuh"

// Blocks of 16 per row the pre-pass walks: H / 16, even for a8 so that lane pairs share a row.
template <int kH>
inline constexpr int kActQuantRowBlocks = kActPrecision == kActA8 ? (kH / 16 + 1) / 2 * 2 : kH / 16;

template <int kE, int kH, int kMats>
__device__ void moe_act_quant(const ActQuantParams& p) {
  static_assert(kActPrecision != kActA16, "the pre-pass serves a8 and a4 keys");
  static_assert(kH % 16 == 0, "whole k16 blocks");
  constexpr int kBlocks = kActQuantRowBlocks<kH>;
  // FC1 may start its weight loads now; it waits for this grid before it reads the rows.
  pdl_launch_dependents();
  const long long item = (long long)blockIdx.x * blockDim.x + threadIdx.x;
  const int q = (int)(item / kBlocks), b = (int)(item % kBlocks);
  const bool in_grid = q < p.route.pairs;
  const int e = in_grid ? p.route.topk_ids[q] - p.route.expert_begin : -1;
  const bool live = e >= 0 && e < kE && b < kH / 16;
  u32x4 lo{0u, 0u, 0u, 0u}, hi{0u, 0u, 0u, 0u};
  if (live) {
    const u32x4* src = reinterpret_cast<const u32x4*>(p.x + (size_t)(q / p.route.top_k) * kH + b * 16);
    lo = src[0];
    hi = src[1];
  }
  // Every lane takes part (a8's shuffle); a lane without a block holds zeros.
  quantize_k16_block<kActPrecision == kActA8 ? 0x1 : 0x0>(lo, hi, live ? act_fc1_x_gs<kMats>(p.gscale, e) : 1.f);
  if (live) {
    u32x4* dst = reinterpret_cast<u32x4*>(p.xq + (size_t)q * kH + b * 16);
    dst[0] = lo;
    dst[1] = hi;
  }
}
