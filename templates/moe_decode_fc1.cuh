// Decode family, FC1: act[q, :] = activation(x[token(q)] . W13[e]^T + b13[e]) rounded to bf16, for every
// routed pair q = m*K + k of every active expert. Grid: (I/16 slabs, active-slot capacity); CTAs of
// slots beyond num_active exit at once.
#pragma once
#include "activations.cuh"
#include "expert_work.cuh"
#include "slab_mma.cuh"

struct DecodeFc1Params {
  const u32x4* w;            // prepared FC1 weights [E][I/16][chunks][mats][32 lanes] x 16 B
  const u8* s;               // prepared FC1 scales  [E][I/16][chunks][mats][8 groups][2 rows][blocks]
  const float* gscale;       // [E] (NVFP4) or null
  const float* bias;         // [E][mats][I] or null
  const u16* x;              // [M][H] bf16
  u16* act;                  // [M*K][I] bf16 times 2^64 (FC2's B operand as is), row q
  i32* counters;             // FC2 completion counters, zeroed here when routing is inline
  i32 num_counters;
  float alpha, beta, limit;
  RoutingArgs route;
};

// The position within its 16-row block at which a row r (0..15) of FC1's output is stored for the
// warpgroup-MMA batch kernels: the prepared FC2 weights hold true K 4c..4c+3 in a lane's MMA columns
// {2c, 2c+1, 2c+8, 2c+9} (fp4_decode.cuh), and a shared-memory B operand is read in MMA column order, so
// FC2's activations are stored in that order: r = 4c + j goes to 2c + j (j < 2) or 2c + 8 + (j - 2).
MOEJIT_DEVICE int mma_k_position(int r) { return ((r >> 2) << 1) + (r & 1) + ((r & 2) << 2); }

// Warp 0, after the reduction over warps: the activation of the slab's gate/up rows for the pass's
// pairs, stored as bf16 times 2^64 (FC2's B operand as is). gs: the slab's fp32 output multiplier.
// kMmaOrder: rows stored at mma_k_position within their 16-row block (the warpgroup-MMA batch kernels).
template <int kAct, bool kLimit, bool kBias, int kI, int kMats, int kNT, int kCols, bool kMmaOrder = false>
MOEJIT_DEVICE void fc1_store_pass(const DecodeFc1Params& p, const ExpertWork& work, int slab, int pass, int live,
                                  const float (&acc)[kNT][kMats][4], float gs) {
  const int e = work.expert;
  for_each_pass_result<kNT, kCols>(pass, live, work.count, [&](int nt, int i, int t, int r) {
    const int row = slab * 16 + r;
    float gate = acc[nt][0][i] * gs, up = kMats == 2 ? acc[nt][kMats - 1][i] * gs : 0.f;
    if (kBias) {
      gate += p.bias[((size_t)e * kMats) * kI + row];
      if (kMats == 2) up += p.bias[((size_t)e * kMats + 1) * kI + row];
    }
    const float a = apply_activation<kAct, kLimit>(gate, up, p.alpha, p.beta, p.limit);
    const int at = kMmaOrder ? slab * 16 + mma_k_position(r) : row;
    p.act[(size_t)work.pairs[t] * kI + at] = f32_to_bf16(a * kActScale);
  });
}

// One (slab, expert) item whose routing is known: work.expert's rows slab*16.. for work's pairs.
template <bool kNvfp4, int kAct, bool kLimit, bool kBias, int kH, int kI, int kWarps, int kNT, int kCols, int kDepth, bool kPrefetchX>
__device__ void moe_decode_fc1_work(const DecodeFc1Params& p, const ExpertWork& work, int slab) {
  constexpr int kMats = kAct == kActRelu2 ? 1 : 2;
  constexpr int kChunks = (kH + 63) / 64;
  constexpr int kSlabs = kI / 16;
  __shared__ float red[kWarps > 1 ? kWarps * kNT * kMats * 4 * 32 : 1];
  // Staged x (one token): per warp kStageZeros zero pieces, then its part of the row, 16 pieces of 8
  // bytes per chunk.
  constexpr int kPartChunks = (kChunks + kWarps - 1) / kWarps;
  constexpr int kStageArea = kStageZeros + kPartChunks * 16;
  __shared__ u32x2 x_stage[kXStaged ? kWarps * kStageArea : 1];
  const int warp = threadIdx.x >> 5;
  const SlabOperands ops = slab_operands<kNvfp4, kChunks, kMats, kSlabs>(p.w, p.s, p.gscale, work.expert, slab);

  for (int pass = 0; pass < work.count; pass += kCols * kNT) {
    const u16* rows[kNT];
    const int live = pass_rows<kNT, kCols>(
        pass, work.count, [&](int t) { return p.x + (size_t)(work.pairs[t] / p.route.top_k) * kH; }, rows);
    float acc[kNT][kMats][4];
    slab_mma<kNvfp4, kH, kMats, kWarps, kNT, kCols, kDepth, true, kPrefetchX>(ops.w, ops.s, rows, live, acc, false, warp,
                                                                                     x_stage + (kXStaged ? warp * kStageArea : 0));
    reduce_over_warps<kMats, kWarps, kNT>(acc, red);
    if (warp == 0) fc1_store_pass<kAct, kLimit, kBias, kI, kMats, kNT, kCols>(p, work, slab, pass, live, acc, ops.gs);
    __syncthreads();  // red is reused by the next pass
  }
}

template <bool kNvfp4, int kAct, bool kLimit, bool kBias, int kE, int kH, int kI, int kWarps, int kNT, int kCols, int kDepth, bool kInline, bool kPrefetchX>
__device__ void moe_decode_fc1_item(const DecodeFc1Params& p, int slab, int slot) {
  __shared__ InlineRouteShared route_sh;
  if (kInline && slab == 0 && slot == 0)
    for (int i = threadIdx.x; i < p.num_counters; i += blockDim.x) p.counters[i] = 0;
  MOEJIT_TRACE_CTA(0);
  const ExpertWork work = expert_work<kInline, kE>(p.route, slot, route_sh);
  MOEJIT_TRACE_CTA(1);
  if (slot >= work.num_active) return;
  MOEJIT_TRACE_CTA_KIND(1);
  moe_decode_fc1_work<kNvfp4, kAct, kLimit, kBias, kH, kI, kWarps, kNT, kCols, kDepth, kPrefetchX>(p, work, slab);
  MOEJIT_TRACE_CTA(6);
}

// One CTA per (slab, slot) item.
template <bool kNvfp4, int kAct, bool kLimit, bool kBias, int kE, int kH, int kI, int kWarps, int kNT, int kCols, int kDepth, bool kInline, bool kPrefetchX>
__device__ void moe_decode_fc1(const DecodeFc1Params& p) {
  // Let FC2 start its weight prefetch as soon as every FC1 CTA is resident.
  pdl_launch_dependents();
  moe_decode_fc1_item<kNvfp4, kAct, kLimit, kBias, kE, kH, kI, kWarps, kNT, kCols, kDepth, kInline, kPrefetchX>(
      p, blockIdx.x, blockIdx.y);
}

// Few pairs (inline routing), grids of several waves: one wave of CTAs, each routes once (every slot
// at once) and walks items blockIdx.x, blockIdx.x + gridDim.x, ... (item = slot * I/16 + slab), so
// later items pay neither a CTA launch nor a routing round trip. decode_fc1_loop keys.
template <bool kNvfp4, int kAct, bool kLimit, bool kBias, int kE, int kH, int kI, int kWarps, int kNT, int kCols, int kDepth, bool kInline, bool kPrefetchX>
__device__ void moe_decode_fc1_loop(const DecodeFc1Params& p) {
  static_assert(kInline, "decode_fc1_loop routes inline");
  constexpr int kSlabs = kI / 16;
  pdl_launch_dependents();
  __shared__ InlineRouteList route;
  MOEJIT_TRACE_CTA(0);
  MOEJIT_TRACE_CTA_KIND(1);
  if (blockIdx.x == 0)
    for (int i = threadIdx.x; i < p.num_counters; i += blockDim.x) p.counters[i] = 0;
  inline_route_list<kE>(p.route.topk_ids, p.route.pairs, p.route.expert_begin, route);
  MOEJIT_TRACE_CTA(1);
  const int items = kSlabs * route.num_active;
  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    const int slot = item / kSlabs, slab = item % kSlabs;
    const int first = route.offset[slot];
    const ExpertWork work{route.num_active, route.expert[slot], route.offset[slot + 1] - first, route.pair + first};
    moe_decode_fc1_work<kNvfp4, kAct, kLimit, kBias, kH, kI, kWarps, kNT, kCols, kDepth, kPrefetchX>(p, work, slab);
  }
  MOEJIT_TRACE_CTA(6);
}
