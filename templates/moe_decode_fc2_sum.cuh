// Decode family, FC2 with the top-k sum inside the CTA, for few pairs (M*K <= 64, routed inline).
// One CTA per 16-row slab of H serves every active expert: its warps take (expert slot, K part) units
// in turn, leave each pair's raw sums in shared memory, and the CTA then sums each token's pairs in
// k order and writes out[m, slab]. Against decode_fc2 this drops the fp32 partial buffer, the
// completion counter and the last CTA's second pass through memory: at decode those are three
// dependent round trips at the end of the layer. Fixed-order sums: bit-identical from run to run.
// Grid: H/16 CTAs. Launched as a programmatic dependent of FC1 (weights load before the wait).
#pragma once
#include "expert_work.cuh"
#include "moe_decode_fc2.cuh"
#include "slab_mma.cuh"

template <bool kNvfp4, bool kBias, int kE, int kH, int kI, int kWarps, int kNT, int kCols, int kDepth, int kParts, bool kPrefetchX>
__device__ void moe_decode_fc2_sum(const DecodeFc2Params& p) {
  constexpr int kChunks = (kI + 63) / 64;
  constexpr int kSlabs = kH / 16;
  __shared__ float red[kInlineMaxPairs * kParts * 16];  // raw sums [pair q][part][row of the slab]
  __shared__ InlineRouteList route;
  const int slab = blockIdx.x;
  MOEJIT_TRACE_CTA(0);
  MOEJIT_TRACE_CTA_KIND(2);
  inline_route_list<kE>(p.route.topk_ids, p.route.pairs, p.route.expert_begin, route);
  MOEJIT_TRACE_CTA(1);
  const int warp = threadIdx.x >> 5;
  const int units = route.num_active * kParts;
  bool waited = false;
#ifdef MOEJIT_TRACE
  MOEJIT_TRACE_WARP(0, trace_now());
  MOEJIT_TRACE_WARP(7, 3ull << 32 | trace_smid());
  int traced_chunks = 0, traced_units = 0;
#endif
  for (int u = warp; u < units; u += kWarps) {
    const int slot = u / kParts, part = u % kParts;
    const int e = route.expert[slot];
    const int first = route.offset[slot], count = route.offset[slot + 1] - first;
    const SlabOperands ops = slab_operands<kNvfp4, kChunks, 1, kSlabs>(p.w, p.s, p.gscale, e, slab);
    for (int pass = 0; pass < count; pass += kCols * kNT) {
      const u16* rows[kNT];
      const int live =
          pass_rows<kNT, kCols>(pass, count, [&](int t) { return p.act + (size_t)route.pair[first + t] * kI; }, rows);
      float acc[kNT][1][4];
      // The warp's first unit waits for FC1 after issuing its first weight loads.
      slab_mma<kNvfp4, kI, 1, kParts, kNT, kCols, kDepth, false, kPrefetchX>(ops.w, ops.s, rows, live, acc, !waited, part);
#ifdef MOEJIT_TRACE
      if (!waited) MOEJIT_TRACE_WARP(1, trace_now());
      MOEJIT_TRACE_WARP(2, trace_now());
      traced_chunks += part_chunks<kChunks, kParts>(part);
      MOEJIT_TRACE_WARP(4, (u64)traced_chunks);
      MOEJIT_TRACE_WARP(5, (u64)++traced_units);
#endif
      waited = true;
      for_each_pass_result<kNT, kCols>(pass, live, count, [&](int nt, int i, int t, int r) {
        red[(route.pair[first + t] * kParts + part) * 16 + r] = acc[nt][0][i];
      });
    }
  }
  // Warps without a unit still wait: the grid must not finish before FC1 has.
  if (!waited) pdl_wait_primary();
#ifdef MOEJIT_TRACE
  MOEJIT_TRACE_WARP(3, trace_now());
#endif
  __syncthreads();
  MOEJIT_TRACE_CTA(5);

  const int K = p.route.top_k;
  for (int idx = threadIdx.x; idx < p.tokens * 16; idx += blockDim.x) {
    const int m = idx >> 4, r = idx & 15, row = slab * 16 + r;
    float sum = 0.f;
    for (int k = 0; k < K; ++k) {
      const int q = m * K + k;
      const int e = p.route.topk_ids[q] - p.route.expert_begin;
      if (e < 0 || e >= kE) continue;
      float y = 0.f;
#pragma unroll
      for (int part = 0; part < kParts; ++part) y += red[(q * kParts + part) * 16 + r];
      y *= kNvfp4 ? p.gscale[e] * kAccScale : kAccScale;
      if (kBias) y += p.bias[(size_t)e * kH + row];
      sum += p.topk_weights[q] * y;
    }
    p.out[(size_t)m * kH + row] = f32_to_bf16(sum);
  }
#ifdef MOEJIT_TRACE
  __syncthreads();
#endif
  MOEJIT_TRACE_CTA(6);
}
