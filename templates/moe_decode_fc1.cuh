// Decode family, FC1: act[q, :] = activation(x[token(q)] . W13[e]^T + b13[e]) rounded to bf16, for every
// routed pair q = m*K + k of every active expert. Grid: (I/16 slabs, active-slot capacity); CTAs of
// slots beyond num_active exit at once. a8: (ceil(I/32) scale blocks, active-slot capacity), each CTA two
// slab groups of kWarps warps (kSlabPairs below).
#pragma once
#include "fc1_epilogue.cuh"
#include "moe_decode_params.cuh"
#include "slab_mma.cuh"

// One (slab, expert) item whose routing is known: work.expert's rows slab*16.. for work's pairs.
// kSlabPairs (a8's decode_fc1 and decode_fc1_loop): the item is a 32-row scale block of the intermediate
// instead, `slab` its index, and the CTA has two slab groups of kWarps warps, group g computing slab
// 2 * slab + g concurrently with the other, each as a one-slab CTA computes its slab. Without it, a8's
// even-slab item computes both slabs of its block in turn and the odd-slab item returns at once (the
// cooperative kernel, whose CTAs have kWarps warps for FC2's phase).
template <bool kNvfp4, int kAct, bool kLimit, bool kBias, int kH, int kI, int kWarps, int kNT, int kCols, int kDepth, bool kPrefetchX,
          bool kSlabPairs = false>
__device__ void moe_decode_fc1_work(const DecodeFc1Params& p, const ExpertWork& work, int slab) {
  constexpr int kMats = kAct == kActRelu2 ? 1 : 2;
  constexpr int kChunks = (kH + 63) / 64;
  constexpr int kSlabs = kI / 16;
  constexpr int kGroups = kSlabPairs ? 2 : 1;  // slab groups of kWarps warps
  __shared__ float red[kWarps > 1 ? kGroups * kWarps * kNT * kMats * 4 * 32 : 1];
  // Staged x (one token): per warp kStageZeros zero pieces, then its part of the row, 16 pieces of 8
  // bytes per chunk.
  constexpr int kPartChunks = (kChunks + kWarps - 1) / kWarps;
  constexpr int kStageArea = kStageZeros + kPartChunks * 16;
  __shared__ u32x2 x_stage[kXStaged ? kGroups * kWarps * kStageArea : 1];
  const int warp = threadIdx.x >> 5;
  static_assert(!kSlabPairs || kActPrecision == kActA8, "slab groups pair the two slabs of an a8 scale block");
  if constexpr (kActPrecision != kActA16) {
    // a8 / a4: x rows are the pairs' rows the act_quant pre-pass quantized (so slab_mma waits for it after
    // its first weight loads), the intermediate is quantized in the epilogue, one scale block of rows at a
    // time, under the expert's global scale (a4; out_gs) with x's 1/a1_gs folded into the output multipliers
    // (both read after the slab's operands, whose loads come first).
    struct ActScales {
      float out_gs, unscale;
    };
    auto scales = [&] {
      return ActScales{act_fc1_out_gs<kMats>(p.gscale, work.expert),
                       act_unscale(act_fc1_x_gs<kMats>(p.gscale, work.expert))};
    };
    auto pass_x_rows = [&](int pass, const u16* (&rows)[kNT]) {
      return pass_rows<kNT, kCols>(
          pass, work.count, [&](int t) { return fc1_x_row<kH>(p.x, work.pairs[t], p.route); }, rows);
    };
    if constexpr (kSlabPairs) {
      // Each group sums its K parts into its first warp, and the two first warps exchange their column
      // maxima (the block's 32 rows) before each quantizes and stores its own slab's rows. With I / 16 odd
      // the last block's second group has no slab: it joins every barrier, with zero maxima, and stores
      // nothing.
      const int group = warp / kWarps, part = warp - group * kWarps;
      const int own = 2 * slab + group;
      const bool has_slab = own < kSlabs;
      const SlabOperands ops =
          slab_operands<kNvfp4, kChunks, kMats, kSlabs>(p.w, p.s, p.gscale, work.expert, has_slab ? own : own - 1);
      const auto [out_gs, unscale] = scales();
      for (int pass = 0; pass < work.count; pass += kCols * kNT) {
        const u16* rows[kNT];
        const int live = pass_x_rows(pass, rows);
        float acc[1][kNT][kMats][4];
        if (has_slab)
          slab_mma<kNvfp4, kH, kMats, kWarps, kNT, kCols, kDepth, true, kPrefetchX>(
              ops.w, ops.s, rows, live, acc[0], /*wait_primary_after_prefetch=*/true, part,
              x_stage + (kXStaged ? warp * kStageArea : 0));
        else
          zero_accumulators(acc[0]);
        reduce_over_warps<kMats, kWarps, kNT, kGroups>(acc[0], red);
        if (part == 0)
          fc1_store_pass_quantized<kAct, kLimit, kBias, kI, kMats, kNT, kCols, 1>(
              p, work, own, has_slab ? 1u : 0u, pass, live, acc, ops.gs * unscale, ops.gs_up * unscale, out_gs,
              SlabGroupPairBlock<kWarps, kNT>{});
        __syncthreads();  // red, the staged x and the exchange area are reused by the next pass
      }
      return;
    } else {
      // a8's blocks are 32 rows here (without kSlabPairs): the CTA of the even slab computes both slabs of
      // its block (the odd slab's CTA has nothing to do), so the block's maximum is in one warp's registers.
      constexpr int kSub = kActPrecision == kActA8 ? 2 : 1;  // 16-row slabs per scale block (a16: unused)
      if (slab % kSub != 0) return;
      const u32 sub_valid = kSub == 2 && slab + 1 < kSlabs ? 3u : 1u;
      SlabOperands ops[kSub];
#pragma unroll
      for (int j = 0; j < kSub; ++j)
        ops[j] = slab_operands<kNvfp4, kChunks, kMats, kSlabs>(p.w, p.s, p.gscale, work.expert,
                                                               (sub_valid >> j) & 1u ? slab + j : slab);
      const auto [out_gs, unscale] = scales();
      for (int pass = 0; pass < work.count; pass += kCols * kNT) {
        const u16* rows[kNT];
        const int live = pass_x_rows(pass, rows);
        float acc[kSub][kNT][kMats][4];
#pragma unroll
        for (int j = 0; j < kSub; ++j) {
          if (!((sub_valid >> j) & 1u)) continue;
          slab_mma<kNvfp4, kH, kMats, kWarps, kNT, kCols, kDepth, true, kPrefetchX>(
              ops[j].w, ops[j].s, rows, live, acc[j], /*wait_primary_after_prefetch=*/true, warp,
              x_stage + (kXStaged ? warp * kStageArea : 0));
          reduce_over_warps<kMats, kWarps, kNT>(acc[j], red);
          __syncthreads();  // red and the staged x are reused by the next slab
        }
        if (warp == 0)
          fc1_store_pass_quantized<kAct, kLimit, kBias, kI, kMats, kNT, kCols, kSub>(
              p, work, slab, sub_valid, pass, live, acc, ops[0].gs * unscale, ops[0].gs_up * unscale, out_gs);
        __syncthreads();
      }
      return;
    }
  }
  const SlabOperands ops = slab_operands<kNvfp4, kChunks, kMats, kSlabs, kCsfFc1>(p.w, p.s, p.gscale, work.expert,
                                                                                    slab MOEJIT_FC1_CSF_PLANES(p));
  // CSF: each warp rebuilds its part's scale bytes into its own area of the CTA's stage.
  using CsfStageFc1 = CsfStage<kNvfp4, kMats, kChunks, kWarps>;
  u8* csf_area = nullptr;
  if constexpr (kCsfFc1)
    csf_area = csf_stage_area<kWarps * CsfStageFc1::kWarpBytes>() + warp * CsfStageFc1::kWarpBytes;

  for (int pass = 0; pass < work.count; pass += kCols * kNT) {
    const u16* rows[kNT];
    const int live = pass_rows<kNT, kCols>(
        pass, work.count, [&](int t) { return p.x + (size_t)(work.pairs[t] / p.route.top_k) * kH; }, rows);
    float acc[kNT][kMats][4];
    slab_mma<kNvfp4, kH, kMats, kWarps, kNT, kCols, kDepth, true, kPrefetchX, false, kCsfFc1>(
        ops.w, ops.s, rows, live, acc, false, warp, x_stage + (kXStaged ? warp * kStageArea : 0), ops.csf, csf_area);
    reduce_over_warps<kMats, kWarps, kNT>(acc, red);
    if (warp == 0) fc1_store_pass<kAct, kLimit, kBias, kI, kMats, kNT, kCols>(p, work, slab, pass, live, acc, ops.gs,
                                                                                      ops.gs_up);
    __syncthreads();  // red is reused by the next pass
  }
}

// slab: the item's slab, or with kSlabPairs its scale block (moe_decode_fc1_work).
template <bool kNvfp4, int kAct, bool kLimit, bool kBias, int kE, int kH, int kI, int kWarps, int kNT, int kCols, int kDepth, bool kInline, bool kPrefetchX,
          bool kSlabPairs = false>
__device__ void moe_decode_fc1_item(const DecodeFc1Params& p, int slab, int slot) {
  __shared__ InlineRouteShared route_sh;
  if (kInline && slab == 0 && slot == 0)
    for (int i = threadIdx.x; i < p.num_counters; i += blockDim.x) p.counters[i] = 0;
  MOEJIT_TRACE_CTA(0);
  const ExpertWork work = expert_work<kInline, kE>(p.route, slot, route_sh);
  MOEJIT_TRACE_CTA(1);
  if (slot >= work.num_active) return;
  MOEJIT_TRACE_CTA_KIND(1);
  moe_decode_fc1_work<kNvfp4, kAct, kLimit, kBias, kH, kI, kWarps, kNT, kCols, kDepth, kPrefetchX, kSlabPairs>(p, work, slab);
  MOEJIT_TRACE_CTA(6);
}

// One CTA per (slab, slot) item; a8: per (scale block, slot), in two slab groups.
template <bool kNvfp4, int kAct, bool kLimit, bool kBias, int kE, int kH, int kI, int kWarps, int kNT, int kCols, int kDepth, bool kInline, bool kPrefetchX>
__device__ void moe_decode_fc1(const DecodeFc1Params& p) {
  // Let FC2 start its weight prefetch as soon as every FC1 CTA is resident.
  pdl_launch_dependents();
  moe_decode_fc1_item<kNvfp4, kAct, kLimit, kBias, kE, kH, kI, kWarps, kNT, kCols, kDepth, kInline, kPrefetchX,
                      kActPrecision == kActA8>(p, blockIdx.x, blockIdx.y);
}

// Few pairs (inline routing), grids of several waves: one wave of CTAs, each routes once (every slot
// at once) and walks items blockIdx.x, blockIdx.x + gridDim.x, ... (item = slot * I/16 + slab; a8:
// slot * ceil(I/32) + scale block, in two slab groups), so later items pay neither a CTA launch nor a
// routing round trip. decode_fc1_loop keys.
template <bool kNvfp4, int kAct, bool kLimit, bool kBias, int kE, int kH, int kI, int kWarps, int kNT, int kCols, int kDepth, bool kInline, bool kPrefetchX>
__device__ void moe_decode_fc1_loop(const DecodeFc1Params& p) {
  static_assert(kInline, "decode_fc1_loop routes inline");
  constexpr bool kSlabPairs = kActPrecision == kActA8;
  constexpr int kItems = kSlabPairs ? (kI / 16 + 1) / 2 : kI / 16;  // per slot: slabs, or a8's scale blocks
  pdl_launch_dependents();
  __shared__ InlineRouteList route;
  MOEJIT_TRACE_CTA(0);
  MOEJIT_TRACE_CTA_KIND(1);
  if (blockIdx.x == 0)
    for (int i = threadIdx.x; i < p.num_counters; i += blockDim.x) p.counters[i] = 0;
  inline_route_list<kE>(p.route.topk_ids, p.route.pairs, p.route.expert_begin, route);
  MOEJIT_TRACE_CTA(1);
  const int items = kItems * route.num_active;
  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    const int slot = item / kItems, slab = item % kItems;
    const int first = route.offset[slot];
    const ExpertWork work{route.num_active, route.expert[slot], route.offset[slot + 1] - first, route.pair + first};
    moe_decode_fc1_work<kNvfp4, kAct, kLimit, kBias, kH, kI, kWarps, kNT, kCols, kDepth, kPrefetchX, kSlabPairs>(
        p, work, slab);
  }
  MOEJIT_TRACE_CTA(6);
}
