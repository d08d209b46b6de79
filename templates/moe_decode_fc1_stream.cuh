// Decode family, FC1 with its weights streamed through shared memory by a producer warp
// (decode_fc1_stream keys, templates/slab_stream.cuh). Same items and results as decode_fc1_loop (one
// wave of CTAs walks the (slab, slot) items with inline routing, chunk c to warp c % kWarps), but warp
// kWarps copies the slabs into a ring of kStages stages of kWarps * kGroup chunks, running ahead across
// the CTA's items, and the kWarps consumer warps compute from shared memory.
#pragma once
#include "moe_decode_fc1.cuh"
#include "slab_stream.cuh"

// The producer lane's whole job: copies the slab of every item this CTA walks (items blockIdx.x,
// + gridDim.x, ... below `items`, item = slot * I/16 + slab), once per pass of kCols * kNT pairs, into
// the ring, in the consumers' order.
template <int kH, int kI, int kMats, int kNT, int kCols, class Ring>
MOEJIT_DEVICE void fill_fc1_items(const Ring& ring, const DecodeFc1Params& p, const InlineRouteList& route, int items) {
  constexpr int kChunks = (kH + 63) / 64;
  constexpr int kSlabs = kI / 16;
  const u64 policy = l2_evict_first_policy();
  u32 n = 0;
  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    const int slot = item / kSlabs, slab = item % kSlabs;
    const int count = route.offset[slot + 1] - route.offset[slot];
    const size_t slab_index = (size_t)route.expert[slot] * kSlabs + slab;
    const u8* w = reinterpret_cast<const u8*>(p.w + slab_index * kChunks * kMats * 32);
    const u8* s = p.s + slab_index * kChunks * kMats * Ring::SG::kBytesPerChunk;  // unused with CSF scales
    for (int pass = 0; pass < count; pass += kCols * kNT) ring.template fill_slab<kChunks>(w, s, n, policy);
  }
}

template <bool kNvfp4, int kAct, bool kLimit, bool kBias, int kE, int kH, int kI, int kWarps, int kNT, int kCols, int kStages, int kGroup>
__device__ void moe_decode_fc1_stream(const DecodeFc1Params& p) {
  constexpr int kMats = kAct == kActRelu2 ? 1 : 2;
  constexpr int kSlabs = kI / 16;
  using Ring = SlabStreamRing<kNvfp4, kMats, kWarps, kStages, kGroup, 0, kCsfFc1>;
  constexpr int kChunks = (kH + 63) / 64;
  extern __shared__ __align__(128) u8 stream_smem[];
  __shared__ InlineRouteList route;
  __shared__ float red[kWarps > 1 ? kWarps * kNT * kMats * 4 * 32 : 1];
  pdl_launch_dependents();
  const int lane = lane_id(), warp = threadIdx.x >> 5;
  const Ring ring = Ring::make(stream_smem);
  MOEJIT_TRACE_CTA(0);
  MOEJIT_TRACE_CTA_KIND(1);
  if (blockIdx.x == 0)
    for (int i = threadIdx.x; i < p.num_counters; i += blockDim.x) p.counters[i] = 0;
  // Its closing CTA barrier also publishes the ring's initialization.
  inline_route_list<kE>(p.route.topk_ids, p.route.pairs, p.route.expert_begin, route);
  MOEJIT_TRACE_CTA(1);
  const int items = kSlabs * route.num_active;

  if (warp == kWarps) {  // the producer: one lane issues every copy, in the consumers' order
    if (lane == 0) fill_fc1_items<kH, kI, kMats, kNT, kCols>(ring, p, route, items);
    return;
  }

  // CSF: each consumer warp rebuilds its chunks' scale bytes into its own area of the CTA's stage.
  using CsfStageFc1 = typename Ring::template CsfStageOf<kH>;
  u8* csf_area = nullptr;
  if constexpr (kCsfFc1)
    csf_area = csf_stage_area<kWarps * CsfStageFc1::kWarpBytes, Ring::kBytes>() + warp * CsfStageFc1::kWarpBytes;
  u32 n = 0;
  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    const int slot = item / kSlabs, slab = item % kSlabs;
    const int first = route.offset[slot];
    const ExpertWork work{route.num_active, route.expert[slot], route.offset[slot + 1] - first, route.pair + first};
    const int g = global_scale_index<kMats>(work.expert);
    const float gs = kNvfp4 ? p.gscale[g] * kAccScale : kAccScale;
    const float gs_up = kNvfp4 && kMats == 2 ? p.gscale[g + 1] * kAccScale : gs;
    for (int pass = 0; pass < work.count; pass += kCols * kNT) {
      const u16* rows[kNT];
      const int live = pass_rows<kNT, kCols>(
          pass, work.count, [&](int t) { return p.x + (size_t)(work.pairs[t] / p.route.top_k) * kH; }, rows);
      float acc[kNT][kMats][4];
      // CSF: the slab's offsets and side arrays (the producer copies weights only).
      const SlabOperands ops =
          slab_operands<kNvfp4, kChunks, kMats, kSlabs, kCsfFc1>(p.w, p.s, p.gscale, work.expert, slab MOEJIT_FC1_CSF_PLANES(p));
      ring.template mma_slab<kH, kNT, kCols, true>(rows, live, acc, warp, n, ops.s, ops.csf, csf_area);
      reduce_over_warps<kMats, kWarps, kNT>(acc, red);
      if (warp == 0) fc1_store_pass<kAct, kLimit, kBias, kI, kMats, kNT, kCols>(p, work, slab, pass, live, acc, gs, gs_up);
      sync_first_threads<kWarps * 32>();  // red is reused by the next pass
    }
  }
  MOEJIT_TRACE_CTA(6);
}
