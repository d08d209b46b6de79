// FC1's epilogue, shared by the families that compute FC1 (decode, batch): the activation of a slab's
// gate/up rows for a pass's pairs, stored as FC2's operand. Params: any FC1 parameter struct with bias,
// alpha, beta, limit and act.
#pragma once
#include "act_quant.cuh"
#include "activations.cuh"
#include "expert_work.cuh"
#include "fp4_decode.cuh"
#include "slab_pair_max.cuh"

// The position within its 16-row block at which a row r (0..15) of FC1's output is stored for the
// warpgroup-MMA batch kernels: the prepared FC2 weights hold true K 4c..4c+3 in a lane's MMA columns
// {2c, 2c+1, 2c+8, 2c+9} (fp4_decode.cuh), and a shared-memory B operand is read in MMA column order, so
// FC2's activations are stored in that order: r = 4c + j goes to 2c + j (j < 2) or 2c + 8 + (j - 2).
MOEJIT_DEVICE int mma_k_position(int r) { return ((r >> 2) << 1) + (r & 1) + ((r & 2) << 2); }

// Warp 0, after the reduction over warps: the activation of the slab's gate/up rows for the pass's
// pairs, stored as bf16 times 2^64 (FC2's B operand as is). gs, gs_up: the fp32 output multipliers of the
// gate (or single) and up rows.
// kMmaOrder: rows stored at mma_k_position within their 16-row block (the warpgroup-MMA batch kernels).
template <int kAct, bool kLimit, bool kBias, int kI, int kMats, int kNT, int kCols, bool kMmaOrder = false, class Params>
MOEJIT_DEVICE void fc1_store_pass(const Params& p, const ExpertWork& work, int slab, int pass, int live,
                                  const float (&acc)[kNT][kMats][4], float gs, float gs_up) {
  const int e = work.expert;
  for_each_pass_result<kNT, kCols>(pass, live, work.count, [&](int nt, int i, int t, int r) {
    const int row = slab * 16 + r;
    float gate = acc[nt][0][i] * gs, up = kMats == 2 ? acc[nt][kMats - 1][i] * gs_up : 0.f;
    if (kBias) {
      gate += p.bias[((size_t)e * kMats) * kI + row];
      if (kMats == 2) up += p.bias[((size_t)e * kMats + 1) * kI + row];
    }
    const float a = apply_activation<kAct, kLimit>(gate, up, p.alpha, p.beta, p.limit);
    const int at = kMmaOrder ? slab * 16 + mma_k_position(r) : row;
    p.act[(size_t)work.pairs[t] * kI + at] = f32_to_bf16(a * kActScale);
  });
}

// The a8 / a4 form of fc1_store_pass (the key's kActPrecision): the activations of kSub adjacent slabs
// (slab0, slab0 + 1, ...; one scale block along I: a4's 16 rows are one slab, a8's 32 rows two) are
// quantized as the reference quantizes the intermediate, from their fp32 values, and stored as the
// operand times 2^64 (a4 without 1/gs, which FC2 folds into its output multiplier). A column's 16 rows of
// a slab sit in the 8 lanes of one lane % 4 (rows g and g + 8), so a block's maximum is a reduction over
// those lanes and the lane's own accumulators. Every lane of the warp holding the sums calls it; sub_valid:
// bit j set when slab slab0 + j exists. out_gs: a4's global scale of the intermediate (a2_gs of the
// expert). block_max: where the block's rows continue in another warp (slab_pair_max.cuh: a8 in the
// warpgroup-MMA kernels, one slab per warp, and in the decode FC1's two slab groups), the exchange of the
// column maxima with it; a warp without a slab (sub_valid 0) still calls it.
template <int kAct, bool kLimit, bool kBias, int kI, int kMats, int kNT, int kCols, int kSub, bool kMmaOrder = false,
          class Params, class BlockMax = SingleWarpBlock>
MOEJIT_DEVICE void fc1_store_pass_quantized(const Params& p, const ExpertWork& work, int slab0, u32 sub_valid, int pass,
                                            int live, const float (&acc)[kSub][kNT][kMats][4], float gs, float gs_up,
                                            float out_gs, BlockMax block_max = {}) {
  static_assert(kActPrecision == kActA16 || kSub * 16 * BlockMax::kBlockWarps == kActBlock<kActPrecision>,
                "one scale block of rows");
  const int e = work.expert;
  const int lane = lane_id(), g = lane >> 2, c4 = lane & 3;
  float a[kSub][kNT][4];
  unsigned amax[kNT][2] = {};  // per n-tile and column parity (accumulators i & 1)
#pragma unroll
  for (int j = 0; j < kSub; ++j)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int t = pass_pair<kCols>(pass, nt, c4, i);
        a[j][nt][i] = 0.f;
        if (!((sub_valid >> j) & 1u) || !(nt < live && t >= 0 && t < work.count)) continue;
        const int row = (slab0 + j) * 16 + g + (i >> 1) * 8;
        float gate = acc[j][nt][0][i] * gs, up = kMats == 2 ? acc[j][nt][kMats - 1][i] * gs_up : 0.f;
        if (kBias) {
          gate += p.bias[((size_t)e * kMats) * kI + row];
          if (kMats == 2) up += p.bias[((size_t)e * kMats + 1) * kI + row];
        }
        const float v = apply_activation<kAct, kLimit>(gate, up, p.alpha, p.beta, p.limit);
        a[j][nt][i] = v;
        const unsigned b = __float_as_uint(v) & 0x7FFFFFFFu;
        amax[nt][i & 1] = b > amax[nt][i & 1] ? b : amax[nt][i & 1];
      }
  // Every slot is quantized by its column's quantizer (slab_pair_max.cuh with_column_quantizers; a slot
  // without a value holds 0), then the slots with values are stored.
  with_column_quantizers<kNT>(amax, out_gs, block_max, [&](int nt, int c, const ActBlockQuant<kActPrecision, 64>& q) {
#pragma unroll
    for (int j = 0; j < kSub; ++j) {
      a[j][nt][c] = q(a[j][nt][c]);
      a[j][nt][c + 2] = q(a[j][nt][c + 2]);
    }
  });
#pragma unroll
  for (int j = 0; j < kSub; ++j)
#pragma unroll
    for (int nt = 0; nt < kNT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int t = pass_pair<kCols>(pass, nt, c4, i);
        if (!((sub_valid >> j) & 1u) || !(nt < live && t >= 0 && t < work.count)) continue;
        const int r = g + (i >> 1) * 8;
        const int at = (slab0 + j) * 16 + (kMmaOrder ? mma_k_position(r) : r);
        p.act[(size_t)work.pairs[t] * kI + at] = f32_to_bf16(a[j][nt][i]);
      }
}
