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
// Four threads take each k16 block of a pair's row, four consecutive values each (thread i: quarter i % 4 of
// k16 block i / 4 % B of pair i / 4 / B, B = H/16 rounded up to even for a8); the block's maximum meets by
// shuffles over the four (a8's 32-value block: over the eight of two neighbouring k16 blocks; a short last
// a8 block of H % 32 == 16 has lanes with nothing, contributing 0). Quarters rather than whole blocks per
// thread: the exact a4 rounding is a chain of tens of dependent instructions per value, and at decode the
// pass is on FC1's critical path (FC1 waits for it after its first weight loads), so each thread's chain is
// four values long, not sixteen. Rows of pairs routed to another rank's experts are not written (FC1 reads
// local pairs only). The values written are the operands (a4 without 1/gs, which FC1 folds into its output
// multiplier).
#pragma once
#include "act_quant.cuh"
#include "moe_act_quant_params.cuh"

// Blocks of 16 per row the pre-pass walks: H / 16, even for a8 so that the eight lanes of a 32-value block
// share a row.
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
  const long long block = item >> 2;
  const int quarter = (int)(item & 3);
  const int q = (int)(block / kBlocks), b = (int)(block % kBlocks);
  const bool in_grid = q < p.route.pairs;
  const int e = in_grid ? p.route.topk_ids[q] - p.route.expert_begin : -1;
  const bool live = e >= 0 && e < kE && b < kH / 16;
  u32x2 piece[1] = {u32x2{0u, 0u}};
  const size_t at = b * 16 + quarter * 4;
  if (live) piece[0] = *reinterpret_cast<const u32x2*>(p.x + (size_t)(q / p.route.top_k) * kH + at);
  // Every lane takes part (the shuffles); a lane without values holds zeros.
  quantize_pieces<kActPrecision, 0, kActPrecision == kActA8 ? 0x7 : 0x3>(piece, live ? act_fc1_x_gs<kMats>(p.gscale, e) : 1.f);
  if (live) *reinterpret_cast<u32x2*>(p.xq + (size_t)q * kH + at) = piece[0];
}
