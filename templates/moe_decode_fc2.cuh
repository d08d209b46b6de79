// Decode family, FC2 and the top-k combine: partial[q, :] = w_q * (act[q] . W2[e]^T + b2[e]) for every
// routed pair q, then, per 16-row slab of H, the last CTA to finish that slab sums each token's pairs in
// slot order (k = 0..K-1) and writes out[m, slab] in bf16. Fixed-order sums, no float atomics: the
// output is bit-identical from run to run. Grid: (H/16 slabs, active-slot capacity).
//
// Launched as a programmatic dependent of FC1: routing and the first weight loads happen before
// griddepcontrol.wait, so they overlap FC1's tail.
#pragma once
#include "expert_work.cuh"
#include "moe_decode_params.cuh"
#include "slab_mma.cuh"

template <bool kNvfp4, bool kBias, int kE, int kH, int kI, int kWarps, int kNT, int kCols, int kDepth, bool kInline, bool kPrefetchX>
__device__ void moe_decode_fc2_item(const DecodeFc2Params& p, int slab, int slot) {
  constexpr int kChunks = (kI + 63) / 64;
  constexpr int kSlabs = kH / 16;
  __shared__ float red[kWarps > 1 ? kWarps * kNT * 4 * 32 : 1];
  __shared__ InlineRouteShared route_sh;
  __shared__ int is_last;

  MOEJIT_TRACE_CTA(0);
  MOEJIT_TRACE_CTA_KIND(2);
  // Inline routing reads only topk_ids; the route kernel's lists were complete before FC1 started.
  const ExpertWork work = expert_work<kInline, kE>(p.route, slot, route_sh);
  MOEJIT_TRACE_CTA(1);
  // With no routed pair at all, slot 0 still takes part so that out is written (with zeros).
  const int participants = work.num_active > 0 ? work.num_active : 1;
  if (slot >= participants) return;
  const int warp = threadIdx.x >> 5;
  bool waited = false;

  if (slot < work.num_active) {
    const int e = work.expert, count = work.count;
    const SlabOperands ops = slab_operands<kNvfp4, kChunks, 1, kSlabs, kCsfFc2>(p.w, p.s, p.gscale, e, slab MOEJIT_FC2_CSF_PLANES(p));
    // CSF: each warp rebuilds its part's scale bytes into its own area of the CTA's stage.
    using CsfStageFc2 = CsfStage<kNvfp4, 1, kChunks, kWarps>;
    u8* csf_area = nullptr;
    if constexpr (kCsfFc2)
      csf_area = csf_stage_area<kWarps * CsfStageFc2::kWarpBytes>() + warp * CsfStageFc2::kWarpBytes;
    const float gs = kActPrecision == kActA4 ? ops.gs * act_unscale(act_fc2_gs(p.gscale, e)) : ops.gs;  // a4: 1/a2_gs
    for (int pass = 0; pass < count; pass += kCols * kNT) {
      const u16* rows[kNT];
      const int live = pass_rows<kNT, kCols>(pass, count, [&](int t) { return p.act + (size_t)work.pairs[t] * kI; }, rows);
      float acc[kNT][1][4];
      // The first pass waits for FC1 after issuing its first weight loads.
      slab_mma<kNvfp4, kI, 1, kWarps, kNT, kCols, kDepth, false, kPrefetchX, false, kCsfFc2>(
          ops.w, ops.s, rows, live, acc, !waited, warp, nullptr, ops.csf, csf_area);
      waited = true;
      reduce_over_warps<1, kWarps, kNT>(acc, red);
      if (warp == 0)
        for_each_pass_result<kNT, kCols>(pass, live, count, [&](int nt, int i, int t, int r) {
          const int row = slab * 16 + r;
          const int q = work.pairs[t];
          float y = acc[nt][0][i] * gs;
          if (kBias) y += p.bias[(size_t)e * kH + row];
          p.partial[(size_t)q * kH + row] = p.topk_weights[q] * y;
        });
      __syncthreads();
    }
  }
  if (!waited) pdl_wait_primary();

  // Completion ticket: the last participant of this slab combines it.
  __threadfence();
  __syncthreads();
  if (threadIdx.x == 0) is_last = atomicAdd(&p.counters[slab], 1) == participants - 1;
  __syncthreads();
  MOEJIT_TRACE_CTA(5);
  if (!is_last) {
    MOEJIT_TRACE_CTA(6);
    return;
  }
  __threadfence();
  const int K = p.route.top_k;
  for (int idx = threadIdx.x; idx < p.tokens * 16; idx += blockDim.x) {
    const int m = idx >> 4, row = slab * 16 + (idx & 15);
    float sum = 0.f;
    for (int k = 0; k < K; ++k) {
      const int q = m * K + k;
      if (pair_is_local(p.route, q, kE)) sum += ld_cg_f32(p.partial + (size_t)q * kH + row);
    }
    p.out[(size_t)m * kH + row] = f32_to_bf16(sum);
  }
  if (threadIdx.x == 0) p.counters[slab] = 0;
  MOEJIT_TRACE_CTA(6);
}

// One CTA per (slab, slot) item.
template <bool kNvfp4, bool kBias, int kE, int kH, int kI, int kWarps, int kNT, int kCols, int kDepth, bool kInline, bool kPrefetchX>
__device__ void moe_decode_fc2(const DecodeFc2Params& p) {
  moe_decode_fc2_item<kNvfp4, kBias, kE, kH, kI, kWarps, kNT, kCols, kDepth, kInline, kPrefetchX>(p, blockIdx.x, blockIdx.y);
}
