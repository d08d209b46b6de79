// The act_quant pre-pass of the a8 and a4 precisions: the layer input quantized before FC1 as DESIGN §1
// quantizes it (act_quant.cuh, bit for bit the reference's rules), into rows that FC1 (decode and batch
// families) or the gather (prefill) then reads as the a16 kernels read x.
//
// Why a pass of its own: an FC1 CTA reads the whole input row of each of its pairs against a 16-row slab of
// weights, so quantizing where FC1 loads x repeats the quantization for every slab (and, in the register-fed
// MMAs, for every lane group of a column), and the exact a4 rounding costs tens of instructions per value
// against about one per decoded weight. Here each value is quantized once.
//
// Once per token where the layer allows it (route.x_per_token: a8, whose blocks have no global scale, and
// a4 whose a1_gs is one value for every expert; runtime/families/prepare.cpp): every pair of a token would
// quantize the same row to the same bits, so one row per token (top_k times less work and traffic, and
// rows FC1 finds in L2). Otherwise once per local pair (a4 with a1_gs per expert, as ModelOpt gives them),
// with the pair's expert's a1_gs; the prefill family then skips this pass and its gather quantizes.
//
// Four threads take each k16 block of a pair's row, four consecutive values each (thread i: quarter i % 4 of
// k16 block i / 4 % B of pair i / 4 / B, B = H/16 rounded up to even for a8); the block's maximum meets by
// shuffles over the four (a8's 32-value block: over the eight of two neighbouring k16 blocks; a short last
// a8 block of H % 32 == 16 has lanes with nothing, contributing 0). Quarters rather than whole blocks per
// thread: the exact a4 rounding is a chain of tens of dependent instructions per value, and at decode the
// pass is on FC1's critical path (FC1 waits for it after its first weight loads), so each thread's chain is
// four values long, not sixteen. Per pair, rows of pairs routed to another rank's experts are not written
// (FC1 reads local pairs only); per token, every token's row is written. The values written are the operands (a4 without 1/gs, which FC1 folds into its output
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
  // q: the row (a token per token, a pair per pair); e: the local expert whose a1_gs applies.
  const int q = (int)(block / kBlocks), b = (int)(block % kBlocks);
  bool live;
  int e = 0, token = q;
  if (p.route.x_per_token) {
    live = q < p.route.pairs / p.route.top_k && b < kH / 16;
  } else {
    e = q < p.route.pairs ? p.route.topk_ids[q] - p.route.expert_begin : -1;
    live = e >= 0 && e < kE && b < kH / 16;
    token = q / p.route.top_k;
  }
  u32x2 piece[1] = {u32x2{0u, 0u}};
  const size_t at = b * 16 + quarter * 4;
  if (live) piece[0] = *reinterpret_cast<const u32x2*>(p.x + (size_t)token * kH + at);
  // Every lane takes part (the shuffles); a lane without values holds zeros.
  quantize_pieces<kActPrecision, 0, kActPrecision == kActA8 ? 0x7 : 0x3>(piece, live ? act_fc1_x_gs<kMats>(p.gscale, e) : 1.f);
  if (live) *reinterpret_cast<u32x2*>(p.xq + (size_t)q * kH + at) = piece[0];
}
