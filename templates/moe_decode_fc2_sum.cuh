// Decode family, FC2 with the top-k sum inside the CTA, for few pairs (M*K <= 64, or 128; routed inline).
// One CTA per 16-row slab of H serves every active expert: its warps take (expert slot, K part) units
// in turn, leave each pair's raw sums in shared memory, and the CTA then sums each token's pairs in
// k order and writes out[m, slab]. Against decode_fc2 this drops the fp32 partial buffer, the
// completion counter and the last CTA's second pass through memory: at decode those are three
// dependent round trips at the end of the layer. Fixed-order sums: bit-identical from run to run.
// Grid: H/16 CTAs. Launched as a programmatic dependent of FC1 (weights load before the wait).
//
// kGroups > 1 spreads a slab over that many CTAs (grid H/16 x kGroups) so that the grid divides over
// the SMs more evenly than H/16 whole slabs do (gpt-oss: 180 slabs on 132 SMs leave 48 SMs two). CTA g
// takes every kGroups-th block of kWarps units, so each expert slot's K parts stay in one CTA; it
// writes w_q * y_q of its pairs to the fp32 partial rows, and the last CTA of the slab to arrive sums
// each token's pairs in slot order, its own from shared memory (the same values). The hand-over costs
// the last CTA about one L2 round trip: its arrival overlaps its epilogue, the others publish their
// rows with a release. Still fixed-order sums: bit-identical from run to run.
//
// kSlabsPerCta = 2 gives each CTA two adjacent slabs (grid H/32): every warp carries both slabs of its
// unit's expert through each chunk, two weight runs in flight per lane against one set of activation
// pieces, so a unit's chain of chunks (each a load round trip at one or two tokens) is half as long for
// the bytes it moves. The grid then has half as many CTAs.
#pragma once
#include "expert_work.cuh"
#include "moe_decode_fc2.cuh"
#include "slab_mma.cuh"

template <bool kNvfp4, bool kBias, int kE, int kH, int kI, int kWarps, int kNT, int kCols, int kDepth, int kParts, int kGroups, bool kPrefetchX,
          int kSlabsPerCta = 1>
__device__ void moe_decode_fc2_sum(const DecodeFc2Params& p) {
  constexpr int kChunks = (kI + 63) / 64;
  constexpr int kSlabs = kH / 16;
  constexpr int kRows = 16 * kSlabsPerCta;  // output rows per CTA
  constexpr int kRowsLog2 = kSlabsPerCta == 2 ? 5 : 4;
  __shared__ float red[kInlineMaxPairs * kParts * kRows];  // raw sums [pair q][part][row of the CTA]
  __shared__ InlineRouteList route;
  static_assert(kGroups == 1 || kWarps % kParts == 0, "a slot's parts must stay in one CTA");
  static_assert(kSlabsPerCta == 1 || (kSlabsPerCta == 2 && kGroups == 1 && kH % 32 == 0), "2 whole slabs per CTA");
  // `slab`: the CTA's block of kRows rows (a 16-row slab unless kSlabsPerCta = 2).
  const int slab = blockIdx.x, group = kGroups > 1 ? static_cast<int>(blockIdx.y) : 0;
  MOEJIT_TRACE_CTA(0);
  MOEJIT_TRACE_CTA_KIND(2);
  inline_route_list<kE>(p.route.topk_ids, p.route.pairs, p.route.expert_begin, route);
  MOEJIT_TRACE_CTA(1);
  const int warp = threadIdx.x >> 5;
  const int units = route.num_active * kParts;
  bool waited = false;
  // CSF: each warp rebuilds its unit's scale bytes into its own area of the CTA's stage.
  using CsfStageFc2 = CsfStage<kNvfp4, kSlabsPerCta, kChunks, kParts, kSlabsPerCta == 2>;
  u8* csf_area = nullptr;
  if constexpr (kCsfFc2)
    csf_area = csf_stage_area<kWarps * CsfStageFc2::kWarpBytes>() + warp * CsfStageFc2::kWarpBytes;
#ifdef MOEJIT_TRACE
  MOEJIT_TRACE_WARP(0, trace_now());
  MOEJIT_TRACE_WARP(7, 3ull << 32 | trace_smid());
  int traced_chunks = 0, traced_units = 0;
#endif
  for (int u = group * kWarps + warp; u < units; u += kWarps * kGroups) {
    const int slot = u / kParts, part = u % kParts;
    const int e = route.expert[slot];
    const int first = route.offset[slot], count = route.offset[slot + 1] - first;
    const SlabOperands ops = slab_operands<kNvfp4, kChunks, 1, kSlabs, kCsfFc2>(p.w, p.s, p.gscale, e, slab * kSlabsPerCta MOEJIT_FC2_CSF_PLANES(p));
    for (int pass = 0; pass < count; pass += kCols * kNT) {
      const u16* rows[kNT];
      const int live =
          pass_rows<kNT, kCols>(pass, count, [&](int t) { return p.act + (size_t)route.pair[first + t] * kI; }, rows);
      float acc[kNT][kSlabsPerCta][4];
      // The warp's first unit waits for FC1 after issuing its first weight loads.
      slab_mma<kNvfp4, kI, kSlabsPerCta, kParts, kNT, kCols, kDepth, false, kPrefetchX, kSlabsPerCta == 2, kCsfFc2>(
          ops.w, ops.s, rows, live, acc, !waited, part, nullptr, ops.csf, csf_area);
#ifdef MOEJIT_TRACE
      if (!waited) MOEJIT_TRACE_WARP(1, trace_now());
      MOEJIT_TRACE_WARP(2, trace_now());
      traced_chunks += part_chunks<kChunks, kParts>(part);
      MOEJIT_TRACE_WARP(4, (u64)traced_chunks);
      MOEJIT_TRACE_WARP(5, (u64)++traced_units);
#endif
      waited = true;
      for_each_pass_result<kNT, kCols>(pass, live, count, [&](int nt, int i, int t, int r) {
#pragma unroll
        for (int m = 0; m < kSlabsPerCta; ++m)
          red[(route.pair[first + t] * kParts + part) * kRows + m * 16 + r] = acc[nt][m][i];
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
  // Pair q's result for row r of the slab (expert e): its parts' raw sums, scaled, plus the bias.
  auto pair_y = [&](int q, int e, int r) {
    float y = 0.f;
#pragma unroll
    for (int part = 0; part < kParts; ++part) y += red[(q * kParts + part) * kRows + r];
    y *= kNvfp4 ? p.gscale[e] * kAccScale : kAccScale;
    if (kActPrecision == kActA4) y *= act_unscale(act_fc2_gs(p.gscale, e));  // a4: the intermediate's 1/a2_gs
    if (kBias) y += p.bias[(size_t)e * kH + slab * kRows + r];
    return y;
  };
  if constexpr (kGroups == 1) {
    for (int idx = threadIdx.x; idx < p.tokens * kRows; idx += blockDim.x) {
      const int m = idx >> kRowsLog2, r = idx & (kRows - 1), row = slab * kRows + r;
      float sum = 0.f;
      for (int k = 0; k < K; ++k) {
        const int q = m * K + k;
        const int e = p.route.topk_ids[q] - p.route.expert_begin;
        if (e < 0 || e >= kE) continue;
        const float y = pair_y(q, e, r);
        sum += p.topk_weights[q] * y;
      }
      p.out[(size_t)m * kH + row] = f32_to_bf16(sum);
    }
  } else {
    // The slab's counter (FC1 zeroed it): arrivals in bits 0-15, CTAs whose rows are published in bits
    // 16+. Thread 0 arrives first, so the round trip overlaps the epilogue below.
    // CTA g computes the slots of every kGroups-th block of kWarps / kParts slots (the units loop above).
    auto computes_slot = [&](int slot) { return (slot / (kWarps / kParts)) % kGroups == group; };
    int* const counter = p.counters + slab;
    __shared__ int arrival;
    int seen = 0;
    if (threadIdx.x == 0) seen = atomic_add_acquire_gpu(counter, 1);
    // w_q * y_q of this CTA's slots (blocks of kWarps / kParts slots, every kGroups-th), kept in red's
    // part-0 entries and written to the partial rows (read only if another CTA of the slab is last).
    // One (pair, row) per thread and step, so that each thread's loads form one round trip.
    const int listed = route.offset[route.num_active];
    for (int idx = threadIdx.x; idx < listed * 16; idx += blockDim.x) {
      const int t = idx >> 4, r = idx & 15, row = slab * 16 + r;
      int slot = 0;  // the slot whose pairs hold list position t: last offset <= t
      for (int step = kInlineMaxPairs / 2; step > 0; step >>= 1)
        if (slot + step < route.num_active && route.offset[slot + step] <= t) slot += step;
      if (!computes_slot(slot)) continue;
      const int e = route.expert[slot], q = route.pair[t];
      const float y = pair_y(q, e, r);
      const float wy = p.topk_weights[q] * y;
      red[q * kParts * 16 + r] = wy;
      p.partial[(size_t)q * kH + row] = wy;
    }
    if (threadIdx.x == 0) arrival = seen;
    __syncthreads();
    if ((arrival & 0xFFFF) != kGroups - 1) {
      // Not the last to arrive: publish (the barrier above ordered every thread's rows first).
      if (threadIdx.x == 0) red_add_release_gpu(counter, 1 << 16);
    } else {
      // The last: the others arrived earlier and publish without waiting; usually the arrival already
      // read all of them.
      if (threadIdx.x == 0 && (arrival >> 16) != kGroups - 1)
        while ((ld_acquire_gpu(counter) >> 16) != kGroups - 1) {
        }
      __syncthreads();
      for (int idx = threadIdx.x; idx < p.tokens * 16; idx += blockDim.x) {
        const int m = idx >> 4, r = idx & 15, row = slab * 16 + r;
        // Up to 8 pairs at a time: their other CTAs' rows load together, then sum in k order.
        float sum = 0.f;
        for (int k0 = 0; k0 < K; k0 += 8) {
          bool local[8];
          float v[8];
#pragma unroll
          for (int j = 0; j < 8; ++j) {
            const int q = m * K + k0 + j;
            const int e = k0 + j < K ? p.route.topk_ids[q] - p.route.expert_begin : -1;
            local[j] = e >= 0 && e < kE;
            const int slot = local[j] ? inline_slot_of(route, e) : 0;
            v[j] = !local[j] ? 0.f
                   : computes_slot(slot) ? red[q * kParts * 16 + r]
                                         : ld_cg_f32(p.partial + (size_t)q * kH + row);
          }
#pragma unroll
          for (int j = 0; j < 8; ++j)
            if (local[j]) sum += v[j];
        }
        p.out[(size_t)m * kH + row] = f32_to_bf16(sum);
      }
      if (threadIdx.x == 0) *counter = 0;
    }
  }
#ifdef MOEJIT_TRACE
  __syncthreads();
#endif
  MOEJIT_TRACE_CTA(6);
}
