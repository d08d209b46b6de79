// FC1's epilogue, shared by the families that compute FC1 (decode, batch): the activation of a slab's
// gate/up rows for a pass's pairs, stored as FC2's operand. Params: any FC1 parameter struct with bias,
// alpha, beta, limit and act.
#pragma once
#include "activations.cuh"
#include "expert_work.cuh"
#include "fp4_decode.cuh"

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
